package redislock

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// Introspection: who holds what (Describe, List) and the administrator's
// way out of a stuck lock (ForceRelease). Describe and List change nothing.

var (
	//go:embed describe.lua
	describeLua string
	//go:embed force_release.lua
	forceReleaseLua string

	describeScript     = lockScript(describeLua).again()
	forceReleaseScript = lockScript(forceReleaseLua)
)

// ErrInvalidPageToken is returned by List for a page token it did not
// hand out for the same prefix.
var ErrInvalidPageToken = errors.New("redislock: invalid page token")

// Kind is what a key is used as.
type Kind uint8

const (
	// KindNone: nobody holds the key.
	KindNone Kind = 0
	// KindLock is a lock, exclusive or read/write.
	KindLock Kind = 1
	// KindElection is an election: its leader holds the key for writing.
	KindElection Kind = 2
	// KindSemaphore is a semaphore: its holders hold permits.
	KindSemaphore Kind = 3
)

// String returns "none", "lock", "election" or "semaphore".
func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindElection:
		return "election"
	case KindSemaphore:
		return "semaphore"
	}
	return "none"
}

// Holder is one lease holding a key, without its lease id.
type Holder struct {
	// Owner is who holds the lease.
	Owner string
	// Mode is Read, Write or Permit.
	Mode Mode
	// HoldCount is how many times the owner holds the lease.
	HoldCount uint32
	// FencingToken is the lease's fencing token.
	FencingToken uint64
	// TTL is the span the lease was last granted or renewed for.
	TTL time.Duration
	// ExpireTime is when the lease ends unless renewed, by Redis's clock.
	ExpireTime time.Time
	// Left is how long the lease still ran when described, by Redis's
	// clock.
	Left time.Duration
}

// LockInfo describes one key.
type LockInfo struct {
	// Key is the key's name.
	Key string
	// Kind is what the key is used as; KindNone when nobody holds it.
	Kind Kind
	// Holders are the leases holding the key, the write holder (or
	// election leader) first, at most MaxDescribedHolders of them.
	Holders []Holder
	// Held is how many leases hold the key (it may exceed len(Holders)).
	Held int
	// WaitingWriters is how many writers (or election candidates) wait;
	// on a semaphore, how many callers wait for a permit.
	WaitingWriters int
	// LastFencingToken is the last fencing token issued for the key; 0
	// when none is kept.
	LastFencingToken uint64
	// Limit is a semaphore's limit, while its permits are held.
	Limit int
	// Leader is an election's leading lease, with Value its proclaimed
	// value; nil when the key has no leader.
	Leader *Holder
	// Value is the leader's value.
	Value string
}

// MaxDescribedHolders bounds the holders Describe returns: a semaphore may
// have many.
const MaxDescribedHolders = 1000

// Describe tells who holds key and who waits for it, without changing
// anything. A key nobody holds is described with KindNone and no holders.
func (c *Client) Describe(ctx context.Context, key string) (LockInfo, error) {
	if err := ValidateKey(key); err != nil {
		return LockInfo{}, err
	}
	return c.describe(ctx, key)
}

func (c *Client) describe(ctx context.Context, key string) (LockInfo, error) {
	ks := c.keys(key)
	reply, err := describeScript.Run(ctx, c.rdb, []string{ks.record}, MaxDescribedHolders).Slice()
	if err != nil {
		return LockInfo{}, err
	}
	if len(reply) != 7 {
		return LockInfo{}, fmt.Errorf("redislock: unexpected describe reply %v", reply)
	}
	now := intAt(reply, 0)
	info := LockInfo{
		Key:              key,
		LastFencingToken: uint64(intAt(reply, 1)),
		Limit:            int(intAt(reply, 2)),
		WaitingWriters:   int(intAt(reply, 3)),
		Held:             int(intAt(reply, 4)),
	}
	value, leading := reply[5].(string)
	list, _ := reply[6].([]any)
	for _, e := range list {
		h, role, err := parseHolder(e, now)
		if err != nil {
			return LockInfo{}, err
		}
		info.Holders = append(info.Holders, h)
		if role == "l" {
			info.Leader = &info.Holders[len(info.Holders)-1]
		}
	}
	switch {
	case leading && info.Leader != nil:
		info.Kind, info.Value = KindElection, value
		l := *info.Leader
		info.Leader = &l
	case info.Limit > 0 || slices.ContainsFunc(info.Holders, func(h Holder) bool { return h.Mode == Permit }):
		info.Kind = KindSemaphore
	case info.Held > 0 || info.WaitingWriters > 0:
		info.Kind = KindLock
	}
	return info, nil
}

// parseHolder reads {mode, hold_count, fencing_token, ttl_ms, expire_ms,
// owner[, role]}.
func parseHolder(e any, now int64) (Holder, string, error) {
	r, ok := e.([]any)
	if !ok || len(r) < 6 {
		return Holder{}, "", fmt.Errorf("redislock: unexpected holder %v", e)
	}
	mode, _ := r[0].(string)
	expire := intAt(r, 4)
	return Holder{
		Mode:         parseMode(mode),
		HoldCount:    uint32(intAt(r, 1)),
		FencingToken: uint64(intAt(r, 2)),
		TTL:          time.Duration(intAt(r, 3)) * time.Millisecond,
		ExpireTime:   time.UnixMilli(expire),
		Left:         max(time.Duration(expire-now)*time.Millisecond, 0),
		Owner:        strAt(r, 5),
	}, strAt(r, 6), nil
}

// ForceRelease ends the leases that owner holds key with, in every mode, or
// those of every holder when owner is empty, whoever keeps them alive, and
// returns them as they were. Their holders' next Renew or KeepAlive finds
// them not held (ErrNotHeld), and every later fencing token of the key
// exceeds theirs. An election whose leader it ends has no leader until a
// candidate is elected; waiters are woken. No lease matching gives
// ErrNotHeld.
func (c *Client) ForceRelease(ctx context.Context, key, owner string) ([]Holder, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	ks := c.keys(key)
	reply, err := forceReleaseScript.Run(ctx, c.rdb, []string{ks.record}, owner, ks.channel, ks.leader, c.publish).Slice()
	if err != nil {
		return nil, err
	}
	var ended []Holder
	for _, e := range reply {
		h, _, err := parseHolder(e, 0)
		if err != nil {
			return nil, err
		}
		h.Left = 0
		ended = append(ended, h)
	}
	if len(ended) == 0 {
		return nil, notHeld(key)
	}
	return ended, nil
}

// ListOptions ask List for one page.
type ListOptions struct {
	// Prefix limits the listing to keys that start with it.
	Prefix string
	// PageSize bounds the keys of a page; default 100.
	PageSize int
	// PageToken continues a listing: the Next of the page before, listed
	// with the same Prefix; empty starts at the beginning.
	PageToken string
	// Keep, if set, leaves out the keys it returns false for, before they
	// are described.
	Keep func(key string) bool
}

// ListPage is one page of a listing.
type ListPage struct {
	// Locks are the keys of the page held or waited for.
	Locks []LockInfo
	// Next continues the listing; empty when it is done.
	Next string
}

// listScans bounds the SCAN calls of one page, so a page costs Redis a
// bounded amount of work however sparse the keys sought are.
const listScans = 8

// pageCursor is where a listing goes on: a Redis master (by address, ""
// for a single Redis), its SCAN cursor, and the last Redis key of the
// batch at that cursor listed already (a batch is walked in order, and the
// same cursor may answer a batch in another order, or with other keys, the
// next time). Prefix ties it to its listing.
type pageCursor struct {
	Node   string `json:"n,omitempty"`
	Cursor uint64 `json:"c,omitempty"`
	After  string `json:"a,omitempty"`
	Prefix string `json:"p,omitempty"`
}

// List returns one page of the keys under opts.Prefix that are held or
// waited for, walking every master of a Cluster in turn. Each page does a
// bounded amount of work, so it may hold fewer than PageSize keys, even
// none, while Next is set. Keys changing meanwhile may be missed or
// listed twice, as with SCAN.
func (c *Client) List(ctx context.Context, opts ListOptions) (ListPage, error) {
	size := opts.PageSize
	if size <= 0 {
		size = 100
	}
	var at pageCursor
	if opts.PageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(opts.PageToken)
		if err != nil || json.Unmarshal(b, &at) != nil || at.Prefix != opts.Prefix {
			return ListPage{}, fmt.Errorf("%w: pass the next page token of the same listing", ErrInvalidPageToken)
		}
	}
	nodes, err := c.masters(ctx)
	if err != nil {
		return ListPage{}, err
	}
	i, ok := slices.BinarySearchFunc(nodes, at.Node, func(n node, addr string) int { return strings.Compare(n.addr, addr) })
	if !ok {
		// The master went away (a failover): go on with the next one.
		at.Cursor, at.After = 0, ""
	}
	pattern := globEscape(c.prefix+":{"+hashTag(opts.Prefix)) + "*"
	count := int64(max(size, 100))
	var keys []string
	next := ""
	for scans := 0; i < len(nodes) && next == ""; scans++ {
		if scans == listScans {
			next = encodePage(pageCursor{Node: nodes[i].addr, Cursor: at.Cursor, After: at.After, Prefix: opts.Prefix})
			break
		}
		batch, cursor, err := nodes[i].rdb.Scan(ctx, at.Cursor, pattern, count).Result()
		if err != nil {
			return ListPage{}, err
		}
		slices.Sort(batch)
		for j := range batch {
			if at.After != "" && batch[j] <= at.After {
				continue
			}
			if len(keys) == size {
				last := at.After
				if j > 0 {
					last = max(last, batch[j-1])
				}
				next = encodePage(pageCursor{Node: nodes[i].addr, Cursor: at.Cursor, After: last, Prefix: opts.Prefix})
				break
			}
			key, ok := c.keyOf(batch[j])
			if ok && strings.HasPrefix(key, opts.Prefix) && (opts.Keep == nil || opts.Keep(key)) {
				keys = append(keys, key)
			}
		}
		if next != "" {
			break
		}
		at.Cursor, at.After = cursor, ""
		if cursor == 0 {
			i++
		}
	}
	infos := make([]LockInfo, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(listDescribers)
	for i, key := range keys {
		g.Go(func() error {
			var err error
			infos[i], err = c.describe(gctx, key)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return ListPage{}, err
	}
	page := ListPage{Next: next}
	for _, info := range infos {
		if info.Kind != KindNone {
			page.Locks = append(page.Locks, info)
		}
	}
	return page, nil
}

// listDescribers bounds the keys of a page described at once.
const listDescribers = 8

func encodePage(p pageCursor) string {
	b, _ := json.Marshal(p) // cannot fail: strings and numbers
	return base64.RawURLEncoding.EncodeToString(b)
}

// node is one Redis master to walk.
type node struct {
	addr string
	rdb  redis.Cmdable
}

// masters returns the Redis masters holding lockd's keys, by address.
func (c *Client) masters(ctx context.Context) ([]node, error) {
	if c.cluster == nil {
		return []node{{addr: "", rdb: c.rdb}}, nil
	}
	var (
		mu    sync.Mutex
		nodes []node
	)
	err := c.cluster.ForEachMaster(ctx, func(_ context.Context, m *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, node{addr: m.Options().Addr, rdb: m})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b node) int { return strings.Compare(a.addr, b.addr) })
	return nodes, nil
}

// keyOf returns the lock key whose record is the Redis key rk.
func (c *Client) keyOf(rk string) (string, bool) {
	tag, ok := strings.CutPrefix(rk, c.prefix+":{")
	if !ok {
		return "", false
	}
	tag, ok = strings.CutSuffix(tag, "}")
	if !ok || strings.ContainsAny(tag, "{}") {
		return "", false
	}
	return unescapeTag(tag)
}

// unescapeTag undoes hashTag.
func unescapeTag(tag string) (string, bool) {
	if !strings.Contains(tag, "%") {
		return tag, true
	}
	var b strings.Builder
	for i := 0; i < len(tag); i++ {
		if tag[i] != '%' {
			b.WriteByte(tag[i])
			continue
		}
		if i+2 >= len(tag) {
			return "", false
		}
		n, err := strconv.ParseUint(tag[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String(), true
}

// globEscape escapes the characters Redis's MATCH patterns treat
// specially.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
