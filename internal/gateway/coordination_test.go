package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestElectionEndpoints runs an election over HTTP/JSON: Campaign as a
// stream of newline-delimited JSON, Leader and Observe by GET with the name
// in the path or the query, Proclaim and Resign by POST; closing the
// Campaign request resigns.
func TestElectionEndpoints(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "jobs/nightly {eu}"

	r := s.call(t, http.MethodGet, "/v1/elections/"+pathOf(name)+":leader", "", "")
	if code, _ := r.grpcStatus(); r.status != http.StatusNotFound || code != int(codes.NotFound) {
		t.Fatalf("Leader of an empty election: HTTP %d %s, want 404", r.status, r.raw)
	}
	octx, stopObserving := context.WithCancel(ctx)
	defer stopObserving()
	obs, err := s.send(octx, http.MethodGet, "/v1/elections:observe?name="+strings.ReplaceAll(pathOf(name), "/", "%2F"), "", "")
	if err != nil || obs.StatusCode != http.StatusOK {
		t.Fatalf("observe: %v %v", obs, err)
	}
	defer obs.Body.Close()
	seen := lines(t, obs.Body)
	if m := next(t, seen); m["result"].(map[string]any)["hasLeader"] != false {
		t.Fatalf("first observation %v, want no leader", m)
	}

	cctx, closeCampaign := context.WithCancel(ctx)
	defer closeCampaign()
	res, err := s.send(cctx, http.MethodPost, "/v1/elections/"+pathOf(name)+":campaign", "", `{"value":"10.0.0.1:8080","owner":"host-1","ttl":"3s"}`)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("campaign: %v %v", res, err)
	}
	defer res.Body.Close()
	campaign := lines(t, res.Body)
	leader, _ := next(t, campaign)["result"].(map[string]any)["leader"].(map[string]any)
	lease, _ := leader["leaseId"].(string)
	if leader["name"] != name || leader["value"] != "10.0.0.1:8080" || leader["owner"] != "host-1" || leader["term"] == "" || lease == "" {
		t.Fatalf("elected: %v", leader)
	}
	if m := next(t, seen); m["result"].(map[string]any)["leader"].(map[string]any)["owner"] != "host-1" {
		t.Fatalf("observation %v, want host-1", m)
	}
	r = s.call(t, http.MethodGet, "/v1/elections/"+pathOf(name)+":leader", "", "").ok(t, "leader")
	if r.str("leader", "owner") != "host-1" || r.str("leader", "term") != leader["term"] || r.str("leader", "leaseId") != "" {
		t.Fatalf("Leader: %s", r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/elections:proclaim", "", `{"name":`+jsonString(name)+`,"leaseId":"`+lease+`","value":"10.0.0.1:9090"}`).ok(t, "proclaim")
	if r.str("leader", "value") != "10.0.0.1:9090" {
		t.Fatalf("Proclaim: %s", r.raw)
	}
	if m := next(t, seen); m["result"].(map[string]any)["leader"].(map[string]any)["value"] != "10.0.0.1:9090" {
		t.Fatalf("observation %v, want the new value", m)
	}

	// Closing the Campaign request resigns.
	closeCampaign()
	if m := next(t, seen); m["result"].(map[string]any)["hasLeader"] != false {
		t.Fatalf("observation %v after the campaign closed, want no leader", m)
	}
	r = s.call(t, http.MethodPost, "/v1/elections/"+pathOf(name)+":resign", "", `{"leaseId":"`+lease+`"}`)
	if code, _ := r.grpcStatus(); r.status != http.StatusNotFound || code != int(codes.NotFound) {
		t.Fatalf("Resign after the campaign closed: HTTP %d %s, want 404", r.status, r.raw)
	}
}

// TestSemaphoreEndpoints takes permits over HTTP/JSON and gives one back
// through the lock endpoints.
func TestSemaphoreEndpoints(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	const key = "wechat/api"
	var leases []string
	for i, owner := range []string{"a", "b"} {
		r := s.call(t, http.MethodPost, "/v1/semaphores/"+key+":acquire", "", `{"limit":2,"owner":"`+owner+`"}`).ok(t, "acquire a permit")
		if r.get("acquired") != true || r.str("lease", "mode") != "LOCK_MODE_PERMIT" || r.get("available") != float64(1-i) {
			t.Fatalf("permit for %s: %s", owner, r.raw)
		}
		leases = append(leases, r.str("lease", "leaseId"))
	}
	r := s.call(t, http.MethodPost, "/v1/semaphores:acquire", "", `{"key":"wechat/api","limit":2,"owner":"c"}`).ok(t, "a full semaphore")
	if r.get("acquired") != false || r.get("available") != float64(0) || r.str("retryAfter") == "" {
		t.Fatalf("full semaphore: %s", r.raw)
	}
	r = s.call(t, http.MethodPost, "/v1/semaphores/"+key+":acquire", "", `{"limit":3}`)
	if code, _ := r.grpcStatus(); r.status != http.StatusBadRequest || code != int(codes.FailedPrecondition) {
		t.Fatalf("another limit: HTTP %d %s, want 400 FAILED_PRECONDITION", r.status, r.raw)
	}
	s.call(t, http.MethodPost, "/v1/locks/"+key+":release", "", `{"leaseId":"`+leases[0]+`"}`).ok(t, "release a permit")
	if r := s.call(t, http.MethodPost, "/v1/semaphores/"+key+":acquire", "", `{"limit":2,"owner":"c"}`).ok(t, "a permit after a release"); r.get("acquired") != true {
		t.Fatalf("permit after a release: %s", r.raw)
	}
}
