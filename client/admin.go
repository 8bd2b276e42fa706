package client

import (
	"context"

	lockdv1 "github.com/lockd/lockd/gen/lockd/v1"
)

// DescribeLock tells who holds key and who waits for it (AdminService):
// holders with owner, mode, hold count, fencing token and expiry, never
// lease ids. A key nobody holds is described with no holders. Clients that
// are not admins may describe only keys under their prefixes.
func (c *Client) DescribeLock(ctx context.Context, key string) (*lockdv1.LockInfo, error) {
	var res *lockdv1.DescribeLockResponse
	err := c.retry(ctx, false, func(ctx context.Context, r int) error {
		actx, cancel := context.WithTimeout(ctx, c.opts.callTimeout)
		defer cancel()
		var err error
		res, err = lockdv1.NewAdminServiceClient(c.conns[r]).DescribeLock(actx, &lockdv1.DescribeLockRequest{Key: key})
		return err
	})
	if err != nil {
		return nil, err
	}
	return res.GetLock(), nil
}
