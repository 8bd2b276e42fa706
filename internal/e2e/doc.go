// Package e2e holds end-to-end tests that run the lockd binary as separate
// processes against real Redis servers.
package e2e
