package client

import "time"

// Each call that takes a lease has an option type of its own, so that an
// option it would not use does not compile: a Mutex has no wait (Lock
// waits, TryLock does not) and no owner (each of its locks has an owner of
// its own, so it is never re-entered), and a campaign waits until elected.
// An option that several calls use implements several of the types.

// AcquireOption configures Acquire, AcquireRead and AcquirePermit:
// WithTTL, WithWait, WithOwner.
type AcquireOption interface {
	applyAcquire(*leaseOptions)
}

// MutexOption configures the locks of a Mutex or RWMutex (NewMutex,
// NewRWMutex): WithTTL.
type MutexOption interface {
	applyMutex(*leaseOptions)
}

// CampaignOption configures the campaigns of an Election (NewElection):
// WithTTL, WithOwner.
type CampaignOption interface {
	applyCampaign(*leaseOptions)
}

// LeaseOption is an option of every call that takes a lease: an
// AcquireOption, a MutexOption and a CampaignOption.
type LeaseOption interface {
	AcquireOption
	MutexOption
	CampaignOption
}

// OwnerOption names a holder: an AcquireOption and a CampaignOption, not a
// MutexOption.
type OwnerOption interface {
	AcquireOption
	CampaignOption
}

// leaseOptions are the options of one call that takes a lease.
type leaseOptions struct {
	ttl   time.Duration // 0: lockd's default
	wait  time.Duration // < 0: until the context ends
	owner string        // "": one made up for each lease
}

type ttlOption time.Duration

func (o ttlOption) applyAcquire(l *leaseOptions)  { l.ttl = time.Duration(o) }
func (o ttlOption) applyMutex(l *leaseOptions)    { l.ttl = time.Duration(o) }
func (o ttlOption) applyCampaign(l *leaseOptions) { l.ttl = time.Duration(o) }

// WithTTL sets the lease's span; the client renews it about every ttl/3
// while it is held. Unset, lockd's default applies (30s). A holder that
// dies keeps the key from others for at most a ttl.
func WithTTL(d time.Duration) LeaseOption { return ttlOption(d) }

type waitOption time.Duration

func (o waitOption) applyAcquire(l *leaseOptions) { l.wait = max(time.Duration(o), 0) }

// WithWait bounds how long Acquire, AcquireRead or AcquirePermit waits for
// the key; 0 tries once. Unset, they wait until their context ends. A key
// still held by others then gives an error matching ErrLocked.
func WithWait(d time.Duration) AcquireOption { return waitOption(d) }

type ownerOption string

func (o ownerOption) applyAcquire(l *leaseOptions)  { l.owner = string(o) }
func (o ownerOption) applyCampaign(l *leaseOptions) { l.owner = string(o) }

// WithOwner names the holder, as DescribeLock and Leader show it. The same
// owner acquiring the same key in the same mode re-enters its lease (one
// more hold; each Release takes one away), and a candidate campaigning
// again under its owner takes up a leadership it already won. Unset, each
// lease gets an owner of its own (host:pid:random), and is released at
// once if this process dies.
func WithOwner(owner string) OwnerOption { return ownerOption(owner) }

func acquireOptions(opts []AcquireOption) leaseOptions {
	o := leaseOptions{wait: -1}
	for _, opt := range opts {
		opt.applyAcquire(&o)
	}
	return o
}

func mutexOptions(opts []MutexOption) leaseOptions {
	var o leaseOptions
	for _, opt := range opts {
		opt.applyMutex(&o)
	}
	return o
}

func campaignOptions(opts []CampaignOption) leaseOptions {
	var o leaseOptions
	for _, opt := range opts {
		opt.applyCampaign(&o)
	}
	return o
}
