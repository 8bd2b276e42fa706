package adminui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strconv"
	"testing"

	"google.golang.org/grpc"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
	"github.com/lockd/lockd/internal/adminui"
)

// manyLocks lists keys k0000 to k(n-1) in pages of the size asked for,
// the page token being the index of the first key of the next page.
type manyLocks struct {
	fakeAdmin
	n int
}

func (m manyLocks) ListLocks(_ context.Context, req *lockdv1.ListLocksRequest, _ ...grpc.CallOption) (*lockdv1.ListLocksResponse, error) {
	from, _ := strconv.Atoi(req.GetPageToken())
	res := &lockdv1.ListLocksResponse{}
	to := min(from+int(req.GetPageSize()), m.n)
	for i := from; i < to; i++ {
		res.Locks = append(res.Locks, &lockdv1.LockInfo{Key: fmt.Sprintf("k%04d", i)})
	}
	if to < m.n {
		res.NextPageToken = strconv.Itoa(to)
	}
	return res, nil
}

// TestLocksArePagedBeyondOneScreen: 4,500 keys, more than one screen of
// the page shows: following "next" from screen to screen lists every key
// once, and the last screen says there is no more.
func TestLocksArePagedBeyondOneScreen(t *testing.T) {
	t.Parallel()
	const keys = 4500
	h := adminui.Handler(adminui.Options{Admin: manyLocks{n: keys}})
	seen := map[string]bool{}
	token, screens := "", 0
	for {
		req := httptest.NewRequest("GET", "/ui/api/locks?prefix=&page_token="+token, nil)
		req.Host = "127.0.0.1:9464"
		req.Header.Set(adminui.Header, "1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			t.Fatalf("screen %d: HTTP %d: %s", screens, w.Code, w.Body)
		}
		var body struct {
			Locks []struct{ Key string }
			Next  *string
		}
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		screens++
		for _, l := range body.Locks {
			if seen[l.Key] {
				t.Fatalf("%s listed twice", l.Key)
			}
			seen[l.Key] = true
		}
		if body.Next == nil {
			t.Fatalf("screen %d (%d keys) tells no next screen", screens, len(body.Locks))
		}
		if *body.Next == "" {
			break
		}
		if screens > 10 {
			t.Fatal("the screens never end")
		}
		token = *body.Next
	}
	if len(seen) != keys || screens != 3 {
		t.Fatalf("%d keys listed over %d screens, want %d over 3", len(seen), screens, keys)
	}
}
