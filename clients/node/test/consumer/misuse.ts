// Misuses the types must reject: each line below an @ts-expect-error that
// compiles fails the type check.
import { LockdClient } from '@lockd/client';

export async function misuse(lockd: LockdClient): Promise<void> {
  // @ts-expect-error a lock's mode is 'write' or 'read', never a permit
  await lockd.acquire('k', { mode: 'permit' });
  // @ts-expect-error a semaphore needs its limit
  await lockd.acquirePermit('k');
  // @ts-expect-error tryAcquire may come back empty
  const l: import('@lockd/client').Lease = await lockd.tryAcquire('k');
  // @ts-expect-error fencing tokens are bigints
  const n: number = l.fencingToken;
  // @ts-expect-error a lease's key cannot be reassigned
  l.key = 'other';
  // @ts-expect-error leases come from the client, not a constructor
  new (await import('@lockd/client')).Lease();
  // @ts-expect-error a client needs its targets
  new LockdClient({});
  void n;
}
