package core

// DefaultLimitName is the name of an unnamed limit, one of n, of
// algorithm a and window (µs): "default" when it is alone, else the
// algorithm's canonical name and the window, "fixed_window_1m" or
// "token_bucket_1s" (FormatWindow). State is kept per limit name, so every
// front end must name limits alike: this is the one source of default
// names, which a Go app's policies (rl.DefaultLimitName), rl-wasm-host's
// rules and decision API, the proxy-wasm filter and the ratelimit service
// use.
func DefaultLimitName(a Algorithm, window int64, n int) string {
	if n == 1 {
		return "default"
	}
	return a.String() + "_" + FormatWindow(window)
}

// FormatWindow writes a window (µs) compactly: whole days as "1d", whole
// hours as "2h", whole minutes as "1m", anything else as
// time.Duration.String writes it ("1s", "1.5s", "500ms", "1m30s"): a form
// time.ParseDuration reads back, days aside. (Written out here rather than
// with package time, which would grow the WebAssembly module by a seventh.)
func FormatWindow(window int64) string {
	const minute, hour, day = 60_000_000, 60 * 60_000_000, 24 * 60 * 60_000_000
	switch {
	case window >= day && window%day == 0:
		return itoa(uint64(window/day)) + "d"
	case window >= hour && window%hour == 0:
		return itoa(uint64(window/hour)) + "h"
	case window >= minute && window%minute == 0:
		return itoa(uint64(window/minute)) + "m"
	case window == 0:
		return "0s"
	case window < 0:
		return "-" + durationString(uint64(-(window+1))+1)
	}
	return durationString(uint64(window))
}

// durationString writes u µs as time.Duration.String does.
func durationString(u uint64) string {
	switch {
	case u < 1000:
		return itoa(u) + "µs"
	case u < 1_000_000:
		return itoa(u/1000) + fraction(u%1000, 3) + "ms"
	}
	secs := u / 1_000_000
	s := itoa(secs%60) + fraction(u%1_000_000, 6) + "s"
	if mins := secs / 60; mins > 0 {
		s = itoa(mins%60) + "m" + s
		if hours := mins / 60; hours > 0 {
			s = itoa(hours) + "h" + s
		}
	}
	return s
}

// fraction writes v, a fraction of 10^digits, as "." and its digits
// without trailing zeros; "" for 0.
func fraction(v uint64, digits int) string {
	if v == 0 {
		return ""
	}
	for v%10 == 0 {
		v /= 10
		digits--
	}
	s := itoa(v)
	for len(s) < digits {
		s = "0" + s
	}
	return "." + s
}

func itoa(u uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + u%10)
		if u /= 10; u == 0 {
			return string(b[i:])
		}
	}
}
