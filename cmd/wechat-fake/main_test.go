package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/lockd/lockd/internal/wechat/wechatfake"
)

func TestRejectMakesTheUpstreamRefuseAToken(t *testing.T) {
	srv := httptest.NewServer(handler(wechatfake.NewHandler(wechatfake.Options{Apps: map[string]string{"wx1": "s"}})))
	defer srv.Close()
	get := func(path string) map[string]any {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tok, _ := get("/cgi-bin/token?grant_type=client_credential&appid=wx1&secret=s")["access_token"].(string)
	if tok == "" {
		t.Fatal("no token minted")
	}
	check := "/cgi-bin/getcallbackip?access_token=" + url.QueryEscape(tok)
	if code, _ := get(check)["errcode"].(float64); code != 0 {
		t.Fatalf("fresh token refused: errcode %v", code)
	}
	for _, c := range []struct {
		query string
		want  int
	}{{"", http.StatusBadRequest}, {"?access_token=" + url.QueryEscape(tok), http.StatusNoContent}} {
		resp, err := http.Post(srv.URL+"/fake/reject"+c.query, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("POST /fake/reject%s: %d, want %d", c.query, resp.StatusCode, c.want)
		}
	}
	if code, _ := get(check)["errcode"].(float64); code != 40001 {
		t.Errorf("rejected token: errcode %v, want 40001", code)
	}
}
