package outage

import (
	"context"
	"errors"
	"fmt"
	"testing"

	rl "github.com/rlcore/rl"
	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// TestClassify is the one failure rule as a table: every kind of error a
// front end meets, as the limiter (or the filter's own store) returns it,
// and its class. A fresh Detector each, so a timeout is the first.
func TestClassify(t *testing.T) {
	storeErr := func(err error) error { return fmt.Errorf("%w: %w", rl.ErrStore, err) } // as rl.Limiter wraps a store's error
	for _, c := range []struct {
		name string
		err  error
		want Class
		nil  Class // with a nil Detector
	}{
		{"invalid key", &rl.KeyError{Key: "k", Reason: "empty"}, Invalid, Invalid},
		{"invalid cost", fmt.Errorf("rl: %q: %w", "k", core.ErrCost), Invalid, Invalid},
		{"busy", storeErr(fmt.Errorf("acquire: %w", store.ErrBusy)), Load, Load},
		{"full", storeErr(fmt.Errorf("memstore: 2000 keys: %w", store.ErrFull)), Load, Load},
		{"a front end's bound", fmt.Errorf("in flight: %w", ErrOverloaded), Load, Load},
		{"busy and unavailable: load wins", storeErr(fmt.Errorf("%w: %w", store.ErrBusy, store.ErrUnavailable)), Load, Load},
		{"down", storeErr(fmt.Errorf("dial: %w", store.ErrUnavailable)), Outage, Outage},
		{"down, not through rl", fmt.Errorf("host: %w", store.ErrUnavailable), Outage, Outage},
		{"a first timeout", storeErr(fmt.Errorf("query: %w: %w", store.ErrUnavailable, context.DeadlineExceeded)), Failed, Failed},
		{"another store failure", storeErr(errors.New("syntax error")), Failed, Failed},
		{"a client's deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), Internal, Internal},
		{"corrupt state", fmt.Errorf("rl: %q: %w", "k", core.ErrState), Internal, Internal},
		{"another core error", fmt.Errorf("rl: %q: %w", "k", core.ErrLimit), Internal, Internal},
		{"anything else", errors.New("bug"), Internal, Internal},
		{"classified: kept", Classified(Load, storeErr(fmt.Errorf("dial: %w", store.ErrUnavailable))), Load, Load},
		{"classified, wrapped", fmt.Errorf("proxy: %w", Classified(Outage, errors.New("x"))), Outage, Outage},
	} {
		t.Run(c.name, func(t *testing.T) {
			var d Detector
			if got := d.Classify(d.Begin(), c.err); got != c.want {
				t.Errorf("Classify = %v, want %v", got, c.want)
			}
			var none *Detector
			if got := none.Classify(0, c.err); got != c.nil {
				t.Errorf("nil Detector: Classify = %v, want %v", got, c.nil)
			}
		})
	}
}

// Timeouts become an outage by the Detector's rule, through Classify; a
// classified error is not counted again.
func TestClassifyTimeouts(t *testing.T) {
	var d Detector
	begun := d.Begin()
	timeout := fmt.Errorf("%w: %w: %w", rl.ErrStore, store.ErrUnavailable, context.DeadlineExceeded)
	for range 5 {
		d.Classify(begun, Classified(Failed, timeout))
	}
	for i, want := range []Class{Failed, Failed, Outage, Outage} {
		if got := d.Classify(begun, timeout); got != want {
			t.Fatalf("timeout %d: %v, want %v", i+1, got, want)
		}
	}
}

func TestClassAnswers(t *testing.T) {
	for c, want := range map[Class]string{Invalid: "400 invalid", Load: "503 load", Outage: "503 outage", Failed: "503 failed", Internal: "500 internal"} {
		status, body := c.Refusal()
		if got := fmt.Sprint(status, " ", c); got != want || body == "" {
			t.Errorf("%v: %s %q, want %s", c, got, body, want)
		}
	}
	if Class(0).String() != "unknown" || ClassOf(errors.New("x")) != 0 || ClassOf(Classified(Load, errors.New("x"))) != Load {
		t.Error("zero class")
	}
}
