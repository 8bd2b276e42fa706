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

// TestTheNextInLineIsToldHowLongToWatch delivers the message sent when the
// head of the queue moves on, "h:<head>|<take>|<next>|<ms>": the new head
// is woken to re-check when it may take the key (take 1) and otherwise only
// told it keeps its place; the waiter next in line is woken with the head's
// time left to watch; nobody else but an election's observers; a later
// message naming a waiter (the key was released) takes what it was told
// back, so that it re-checks on Redis.
func TestTheNextInLineIsToldHowLongToWatch(t *testing.T) {
	s := &subscriber{}
	tp := &topic{waiters: map[chan struct{}]interest{}, byID: map[string]chan struct{}{}}
	const headID, nextID, otherID = "HHHHHHHHHHH", "AAAAAAAAAAA", "BBBBBBBBBBB"
	var headWatch, watch, otherWatch atomic.Int64
	head, _ := s.join(tp, interest{id: headID, watch: &headWatch})
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

	tp.deliver(headPrefix + headID + "|0|" + nextID + "|1150")
	if !woken(head) || !woken(next) || woken(other) || !woken(observer) {
		t.Fatal("the message should wake the head, the next in line and the observers alone")
	}
	if got := headWatch.Load(); got != headBusy {
		t.Fatalf("head's watch = %d, want %d: the key is held, the head only keeps its place", got, headBusy)
	}
	if got := watch.Load(); got != 1150 {
		t.Fatalf("watch = %d ms, want 1150", got)
	}
	if otherWatch.Load() != 0 {
		t.Fatal("another waiter was told to watch")
	}

	tp.deliver(headID)
	if !woken(head) || headWatch.Load() != 0 {
		t.Fatal("the release's message should wake the head to re-check, with nothing left to watch")
	}
	tp.deliver(nextID)
	if !woken(next) {
		t.Fatal("the head message did not wake its waiter")
	}
	if got := watch.Load(); got != 0 {
		t.Fatalf("watch = %d ms after the head message, want 0: the waiter would not re-check", got)
	}

	tp.deliver(headPrefix + otherID + "|1||1200")
	if !woken(other) || otherWatch.Load() != 0 || woken(next) || woken(head) {
		t.Fatal("a head that may take the key should be woken alone (with the observers) to re-check")
	}
	woken(observer)

	tp.deliver(headPrefix + otherID + "|0|oops")
	if !woken(head) || !woken(next) || !woken(other) || !woken(observer) {
		t.Fatal("a malformed message should wake everyone to re-check")
	}
}
