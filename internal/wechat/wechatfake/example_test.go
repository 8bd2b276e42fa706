package wechatfake_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func Example() {
	// A manual clock drives the fake's windows.
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fake := wechatfake.New(wechatfake.Options{
		Apps: map[string]string{"wx1234": "app-secret"},
		Now: func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		},
	})
	defer fake.Close()

	mint := func() string {
		resp, err := http.Get(fake.URL() + "/cgi-bin/token?grant_type=client_credential&appid=wx1234&secret=app-secret")
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var r struct {
			AccessToken string `json:"access_token"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			panic(err)
		}
		return r.AccessToken
	}

	first := mint()
	second := mint() // classic: a new token; the first lives five more minutes
	fmt.Println(fake.Valid(first), fake.Valid(second))

	mu.Lock()
	now = now.Add(5 * time.Minute)
	mu.Unlock()
	fmt.Println(fake.Valid(first), fake.Valid(second), fake.Mints("wx1234"))

	fake.FailNext(1, 45009)
	fmt.Printf("%q\n", mint())
	// Output:
	// true true
	// false true 2
	// ""
}
