package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
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

func TestStatsCountMintsAndTheTokensAnAPIWasCalledWith(t *testing.T) {
	srv := httptest.NewServer(handler(wechatfake.NewHandler(wechatfake.Options{Feishu: map[string]string{"cli_1": "s"}})))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/open-apis/auth/v3/tenant_access_token/internal", "application/json", strings.NewReader(`{"app_id":"cli_1","app_secret":"s"}`))
	if err != nil {
		t.Fatal(err)
	}
	var minted struct {
		Token string `json:"tenant_access_token"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&minted)
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/open-apis/contact/v3/scopes", nil)
	req.Header.Set("Authorization", "Bearer "+minted.Token)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("API call with the token: %v, %v", resp, err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/fake/stats?id=cli_1&path=" + url.QueryEscape("/open-apis/contact/v3/scopes"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var stats struct {
		Requests int      `json:"token_requests"`
		Issued   int      `json:"issued"`
		Seen     []string `json:"seen"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		t.Fatal(err)
	}
	if stats.Requests != 1 || stats.Issued != 1 || len(stats.Seen) != 1 || stats.Seen[0] != minted.Token {
		t.Fatalf("stats = %+v", stats)
	}
}

func TestRunRefusesNoApps(t *testing.T) {
	if err := run(context.Background(), []string{"--listen", "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "no apps") {
		t.Fatalf("run = %v", err)
	}
}
