package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/lockd/lockd/client"
)

// A replica of a service campaigns to run the scheduler. Once elected it
// works until its leadership is lost or it resigns, and passes its term
// (a fencing token) with every write, so a deposed leader's late writes are
// rejected.
func ExampleElection_Campaign() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	scheduler := c.NewElection("scheduler", client.WithTTL(10*time.Second))
	l, err := scheduler.Campaign(ctx, "10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	select {
	case <-l.Lost():
		log.Print("leadership lost: stop scheduling")
	default:
		fmt.Printf("leading %s with value %s (term given: %t)\n", l.Name(), l.Value(), l.Term() > 0)
	}

	leader, err := c.NewElection("scheduler").Leader(ctx) // as any other replica asks
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the leader is at", leader.Value)

	if err := l.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// leading scheduler with value 10.0.0.7:8080 (term given: true)
	// the leader is at 10.0.0.7:8080
}

// Election.Run takes part in an election for as long as the service runs,
// in the manner of Curator's LeaderLatch: lead is called each time this
// candidate is elected, with a context that ends when the leadership is
// lost.
func ExampleElection_Run() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	e := c.NewElection("billing-exporter", client.WithTTL(10*time.Second))
	err = e.Run(context.Background(), "10.0.0.7", func(ctx context.Context, l *client.Leadership) error {
		fmt.Println("elected; exporting with fencing token given:", l.Term() > 0)
		// Export until done, or until ctx ends (leadership lost): Run
		// then campaigns again. Returning resigns.
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// elected; exporting with fencing token given: true
	// done: <nil>
}

// Observe follows who leads: at once the current state, then each change.
func ExampleElection_Observe() {
	c, err := client.New([]string{addr})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	primary := c.NewElection("primary-db")
	states, err := primary.Observe(ctx)
	if err != nil {
		log.Fatal(err)
	}
	show := func(o client.Observation) {
		if o.HasLeader {
			fmt.Println("leader:", o.Leader.Value)
		} else {
			fmt.Println("no leader")
		}
	}
	show(<-states)
	l, err := primary.Campaign(ctx, "db-2")
	if err != nil {
		log.Fatal(err)
	}
	show(<-states)
	_ = l.Resign(ctx)
	show(<-states)
	// Output:
	// no leader
	// leader: db-2
	// no leader
}
