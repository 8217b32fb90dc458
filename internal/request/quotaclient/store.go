package quotaclient

import (
	"context"
	"errors"

	"github.com/rlcore/rl/core"
	"github.com/rlcore/rl/store"
)

// Store is a store.Store deciding every request on one Bucket: the rule's
// policy names the limit (one, its ceiling), the bucket's assignment or
// fallback decides, whatever the key. It never waits and never fails but
// on an invalid request (core's errors), so a global rule is never failed
// open: load and outages alike end in the bucket's fallback.
type Store struct {
	// B is the bucket; required.
	B *Bucket
}

var _ store.Store = Store{}

// ErrReset is returned by Reset: a replica cannot reset a global limit's
// usage (a fresh local bucket would admit a whole burst the server has
// not granted).
var ErrReset = errors.New("quotaclient: a global rule's usage cannot be reset on one replica: it is the RLQS server's")

// Decide decides req on the bucket at req.Now. A policy of more than one
// limit is refused (core.ErrLimits): a global rule has one.
func (s Store) Decide(_ context.Context, req store.Request, each []core.Decision) (int, core.Decision, error) {
	if req.Policy == nil || req.Policy.Len() != 1 {
		return 0, core.Decision{}, core.ErrLimits
	}
	d, err := s.B.Decide(req.Op, req.Now, req.Cost)
	if err != nil {
		return 0, core.Decision{}, err
	}
	if len(each) > 0 {
		each[0] = d
	}
	return 0, d, nil
}

// Reset refuses: see ErrReset.
func (s Store) Reset(context.Context, string, string, []string) error { return ErrReset }
