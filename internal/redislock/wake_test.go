package redislock

import "testing"

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
