package service

import (
	"context"
	"errors"
	"testing"

	"github.com/lockd/lockd/internal/token"
)

// TestSwapBrokerRetiresTheOldBrokerOnceItsCallsEnd: a call under way keeps
// the broker it started on; the replaced broker is reported idle only when
// that call ends; later calls use the new broker.
func TestSwapBrokerRetiresTheOldBrokerOnceItsCallsEnd(t *testing.T) {
	t.Parallel()
	old, replacement := &token.Broker{}, &token.Broker{}
	s := newSwapBroker(old)
	b, done := s.use()
	if b != old {
		t.Fatal("the first call did not get the first broker")
	}
	retired, idle := s.swap(replacement)
	if retired != old {
		t.Fatal("swap did not return the replaced broker")
	}
	select {
	case <-idle:
		t.Fatal("the replaced broker is idle while a call runs on it")
	default:
	}
	if b2, done2 := s.use(); b2 != replacement {
		t.Fatal("a later call did not get the new broker")
	} else {
		done2()
	}
	done()
	<-idle // closed once the call ended

	_, idle = s.swap(nil)
	<-idle // nothing ran on it: idle at once
	if _, err := s.Get(context.Background(), "mp", token.Caller{}); !errors.Is(err, token.ErrUnknownApp) {
		t.Fatalf("Get without a broker: %v", err)
	}
}
