package core

// Decider is the decision function a store applies inside its atomic
// read-modify-write. Native is this package compiled into the program; the
// WebAssembly host (package wasm) runs the same code compiled to WASM. Both
// return identical decisions, states and errors for identical input.
//
// TakeAll, PeekAll and SettleAll have the contract of the package functions
// of the same name; implementations must be safe for concurrent use.
type Decider interface {
	TakeAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error)
	PeekAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error)
	SettleAll(ls []Limit, ss []State, now, delta int64, ds []Decision) (int, error)
}

// Native is the Decider that calls this package directly. Its zero value is
// ready to use.
type Native struct{}

// TakeAll calls the package function TakeAll.
func (Native) TakeAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return TakeAll(ls, ss, now, cost, ds)
}

// PeekAll calls the package function PeekAll.
func (Native) PeekAll(ls []Limit, ss []State, now, cost int64, ds []Decision) (int, error) {
	return PeekAll(ls, ss, now, cost, ds)
}

// SettleAll calls the package function SettleAll.
func (Native) SettleAll(ls []Limit, ss []State, now, delta int64, ds []Decision) (int, error) {
	return SettleAll(ls, ss, now, delta, ds)
}
