// A TypeScript program using @lockd/client as an application would, once
// installed from the packed tarball: test/package.test.js type-checks it,
// compiles it and runs it against a lockd at process.env.LOCKD_ADDR.
import {
  LockdClient,
  LockdError,
  LeaseLostError,
  status,
  type Lease,
  type LeaderInfo,
  type Leadership,
} from '@lockd/client';

const lockd = new LockdClient({ targets: [process.env.LOCKD_ADDR ?? '127.0.0.1:50051'], defaultTtlMs: 5000 });

const lease: Lease = await lockd.acquire('consumer/orders/42');
const token: bigint = lease.fencingToken;
console.log(`holding ${lease.key} (${lease.mode}) with fencing token ${token}`);
lease.on('lost', (err: LeaseLostError) => console.log(`lost ${err.key}: ${err.reason}`));

const busy: Lease | null = await lockd.tryAcquire('consumer/orders/42', { owner: 'someone else' });
console.log(`a second owner got it: ${busy !== null}`);
await lease.release();

const total = await lockd.withLock('consumer/orders/42', async (l) => {
  l.checkHeld();
  return l.holdCount + 1;
});
console.log(`withLock returned ${total}`);

const readers = await Promise.all([lockd.acquire('consumer/report', { mode: 'read' }), lockd.acquire('consumer/report', { mode: 'read' })]);
console.log(`readers: ${readers.map((r) => r.mode).join(',')}`);
await Promise.all(readers.map((r) => r.release()));

const permit = await lockd.tryAcquirePermit('consumer/upstream', 2, { waitMs: 1000 });
console.log(`permit: ${permit?.mode}`);
await permit?.release();

const leadership: Leadership = await lockd.campaign('consumer/scheduler', 'node-1');
await leadership.proclaim('node-1:8080');
const seen: LeaderInfo | null = await lockd.leader('consumer/scheduler');
console.log(`leader ${seen?.value} in term ${seen?.term === leadership.term ? 'matching' : 'other'}`);
await leadership.resign();
console.log(`leader after resigning: ${await lockd.leader('consumer/scheduler')}`);

try {
  await lockd.tryAcquire('');
} catch (e) {
  if (e instanceof LockdError) console.log(`empty key: ${status[e.code]}`);
  else throw e;
}
await lockd.close();
