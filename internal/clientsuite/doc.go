// Package clientsuite tests the Go client (the module
// github.com/lockd/lockd/client) under the faults only a server in the
// same process can inject: replicas killed, drained or gone silent, grants
// whose replies are lost, a Redis that freezes, many holders on replicas
// sharing one Redis. Its replicas are lockd's services on real Redis
// servers. It lives in lockd's main module so that the client's own module
// needs neither the server nor Redis; the client's own tests run against a
// lockd process.
package clientsuite
