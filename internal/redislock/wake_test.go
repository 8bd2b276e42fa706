package redislock

import (
	"sync/atomic"
	"testing"
)

// TestMessagesWakeOnlyWhomTheyName delivers each kind of message to a
// channel's waiters in one process: an attempt id wakes that waiter alone,
// 'r' every reader, an id of another process's waiter nobody, anything
// else everyone; an election's observers hear every message.
func TestMessagesWakeOnlyWhomTheyName(t *testing.T) {
	s := &subscriber{}
	tp := &topic{waiters: map[chan struct{}]interest{}, byID: map[string]chan struct{}{}}
	const headID, otherID = "AAAAAAAAAAA", "BBBBBBBBBBB"
	head, _ := s.join(tp, interest{id: headID})
	other, _ := s.join(tp, interest{id: otherID})
	reader, _ := s.join(tp, interest{id: "CCCCCCCCCCC", reader: true})
	observer, _ := s.join(tp, interest{all: true})
	all := map[string]chan struct{}{"head": head, "other": other, "reader": reader, "observer": observer}
	for _, tc := range []struct {
		name, msg string
		woken     []string
	}{
		{"the head of the queue is woken alone", headID, []string{"head", "observer"}},
		{"readers are woken together", readersWake, []string{"reader", "observer"}},
		{"another process's waiter wakes nobody here", "ZZZZZZZZZZZ", []string{"observer"}},
		{"a message naming nobody wakes everyone", wakeAll, []string{"head", "other", "reader", "observer"}},
		{"an unknown message wakes everyone", "", []string{"head", "other", "reader", "observer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp.deliver(tc.msg)
			for name, w := range all {
				want := false
				for _, n := range tc.woken {
					want = want || n == name
				}
				got := false
				select {
				case <-w:
					got = true
				default:
				}
				if got != want {
					t.Errorf("%s woken = %v, want %v", name, got, want)
				}
			}
		})
	}
}

// TestTheNextInLineIsToldHowLongToWatch delivers "<id>|<ms>" to the
// waiter next in line: it alone is woken, with the head's time left to
// watch; a later message naming it (it became the head) takes that back,
// so that it re-checks on Redis.
func TestTheNextInLineIsToldHowLongToWatch(t *testing.T) {
	s := &subscriber{}
	tp := &topic{waiters: map[chan struct{}]interest{}, byID: map[string]chan struct{}{}}
	const nextID, otherID = "AAAAAAAAAAA", "BBBBBBBBBBB"
	var watch, otherWatch atomic.Int64
	next, _ := s.join(tp, interest{id: nextID, watch: &watch})
	other, _ := s.join(tp, interest{id: otherID, watch: &otherWatch})
	observer, _ := s.join(tp, interest{all: true})
	woken := func(w chan struct{}) bool {
		select {
		case <-w:
			return true
		default:
			return false
		}
	}

	tp.deliver(nextID + "|1150")
	if !woken(next) || woken(other) || woken(observer) {
		t.Fatal("the next-in-line message should wake its waiter alone")
	}
	if got := watch.Load(); got != 1150 {
		t.Fatalf("watch = %d ms, want 1150", got)
	}
	if otherWatch.Load() != 0 {
		t.Fatal("another waiter was told to watch")
	}

	tp.deliver(nextID)
	if !woken(next) {
		t.Fatal("the head message did not wake its waiter")
	}
	if got := watch.Load(); got != 0 {
		t.Fatalf("watch = %d ms after the head message, want 0: the waiter would not re-check", got)
	}

	tp.deliver(otherID + "|oops")
	if !woken(other) || otherWatch.Load() != 0 {
		t.Fatal("a malformed time should wake the waiter to re-check, with nothing to watch")
	}
}
