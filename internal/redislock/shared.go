package redislock

import "time"

// HashTag returns the Redis Cluster hash tag of key's Redis keys
// (<prefix>:{<tag>}): key with '{', '}' and '%' escaped, so distinct keys
// keep distinct tags. Another engine keeping Redis keys of its own for a
// lock key tags them the same, so they share the lock's hash slot and its
// data-loss marker (see DataLossMarker).
func HashTag(key string) string { return hashTag(key) }

// DataLossMarker returns the data-loss marker of the hash slot of the keys
// tagged {tag}, and the grace lock scripts hold new grants back for when
// they find it missing; "" and 0 when the engine does not watch for data
// loss (Options.DataLossGrace). After Prepare, a script of another engine
// on keys tagged {tag} may read it: it holds "hold until" (ms, Redis
// clock), 0 when no loss was seen since it was made; missing means Redis
// lost its data, and the script makes it again holding until now + grace,
// as the lock scripts do, so both engines learn of the loss.
func (c *Client) DataLossMarker(tag string) (string, time.Duration) {
	if c.lossGrace <= 0 {
		return "", 0
	}
	return c.markerOf(tag), c.lossGrace
}
