package core_test

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/rlcore/rl/core"
)

// TestFormatWindow: whole days, hours and minutes compactly, anything else
// exactly as time.Duration.String writes it, over fixed and random windows.
func TestFormatWindow(t *testing.T) {
	for us, want := range map[int64]string{
		1: "1µs", 999: "999µs", 1000: "1ms", 1500: "1.5ms", 500_000: "500ms", 1_000_000: "1s", 1_500_000: "1.5s",
		60_000_000: "1m", 90_000_000: "1m30s", 3_600_000_000: "1h", 3_600_500_000: "1h0m0.5s", 86_400_000_000: "1d",
		90_000_000_000: "25h", 2 * 86_400_000_000: "2d", 0: "0s", -60_000_000: "-1m0s", core.MaxWindow: "277777h46m40s",
	} {
		if got := core.FormatWindow(us); got != want {
			t.Errorf("FormatWindow(%d) = %q, want %q", us, got, want)
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		us := rnd.Int64N(core.MaxWindow) >> rnd.IntN(50)
		got := core.FormatWindow(us)
		if us%60_000_000 == 0 && us > 0 {
			if n, _ := strconv.ParseInt(got[:len(got)-1], 10, 64); n == 0 {
				t.Fatalf("FormatWindow(%d) = %q", us, got)
			}
			continue
		}
		if want := (time.Duration(us) * time.Microsecond).String(); got != want {
			t.Fatalf("FormatWindow(%d) = %q, want %q", us, got, want)
		}
		if d, err := time.ParseDuration(got); err != nil || d != time.Duration(us)*time.Microsecond {
			t.Fatalf("%q reads back as %v, %v", got, d, err)
		}
	}
	if got := core.FormatWindow(math.MinInt64); got == "" {
		t.Fatal("MinInt64")
	}
}

func TestDefaultLimitName(t *testing.T) {
	if got := core.DefaultLimitName(core.GCRA, 1_000_000, 1); got != "default" {
		t.Error(got)
	}
	if got := core.DefaultLimitName(core.TokenBucket, 1_000_000, 2); got != "token_bucket_1s" {
		t.Error(got)
	}
	if got := core.DefaultLimitName(core.FixedWindow, 86_400_000_000, 3); got != "fixed_window_1d" {
		t.Error(got)
	}
}
