package core

// MaxLimits is the most limits one multi-limit call decides together: a
// policy of package rl, a call of the WebAssembly module (its buffer has
// this many slots), the SQL functions' arrays and the proxy-wasm filter's
// rules all hold at most this many. TakeAll and PeekAll themselves accept
// any number; the bound is what every runtime agrees to support.
const MaxLimits = 16
