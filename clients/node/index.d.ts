// Types of @lockd/client, lockd's Node client (lib/index.js).
import { EventEmitter } from 'node:events';
import { status } from '@grpc/grpc-js';

export { status };

/** TLS options: PEM file paths. */
export interface TlsOptions {
  /** The CA bundle to trust (default: the system's). */
  ca?: string;
  /** The client certificate, for mutual TLS (with key). */
  cert?: string;
  /** The client certificate's private key. */
  key?: string;
  /** The name to expect in the server's certificate, when not the target's host. */
  serverName?: string;
}

/** Options of a LockdClient. */
export interface LockdClientOptions {
  /** lockd addresses ("host:port"), in order of preference; calls move to the next on UNAVAILABLE. */
  targets: string[];
  /** A bearer token sent with every call. */
  token?: string;
  /** A file holding the bearer token, read again when it changes. */
  tokenFile?: string;
  /** TLS to lockd; plaintext when absent. */
  tls?: TlsOptions;
  /** Each attempt's deadline beyond its wait, in milliseconds (default 10000). */
  callTimeoutMs?: number;
  /** How long UNAVAILABLE is retried beyond the wait, in milliseconds (default 15000). */
  retryTimeoutMs?: number;
  /** The ttl of leases and leaderships whose options set none, in milliseconds (default 30000). */
  defaultTtlMs?: number;
}

/** Options of acquire: how to hold the key. */
export interface AcquireOptions {
  /** 'write' (default: one holder) or 'read' (many readers, no writer). */
  mode?: 'write' | 'read';
  /** The lease's ttl in milliseconds (default the client's defaultTtlMs). */
  ttlMs?: number;
  /** The owner: the same owner re-enters its lease; empty means a fresh owner. */
  owner?: string;
  /** Aborts the wait. */
  signal?: AbortSignal;
}

/** Options of tryAcquire and withLock: acquire's, and how long to wait. */
export interface TryAcquireOptions extends AcquireOptions {
  /** How long to wait for the key in milliseconds; 0 (tryAcquire's default) tries once. */
  waitMs?: number;
}

/** Options of acquirePermit. */
export interface PermitOptions {
  /** The permit's ttl in milliseconds (default the client's defaultTtlMs). */
  ttlMs?: number;
  /** The owner; empty means a fresh owner. */
  owner?: string;
  /** Aborts the wait. */
  signal?: AbortSignal;
}

/** Options of tryAcquirePermit and withPermit: acquirePermit's, and how long to wait. */
export interface TryPermitOptions extends PermitOptions {
  /** How long to wait for a permit in milliseconds; 0 (tryAcquirePermit's default) tries once. */
  waitMs?: number;
}

/** Options of campaign and withLeadership. */
export interface CampaignOptions {
  /** The leadership's ttl in milliseconds (default the client's defaultTtlMs). */
  ttlMs?: number;
  /** The candidate's owner: the current leader's owner resumes its leadership; empty means a fresh owner. */
  owner?: string;
  /** Gives up the campaign, leaving nothing behind. */
  signal?: AbortSignal;
}

/** An app's access token. */
export interface AccessToken {
  /** The token to send to the upstream API. */
  accessToken: string;
  /** When the upstream stops accepting it. */
  expireTime: Date;
}

/** An election's leader, as anyone may see it. */
export interface LeaderInfo {
  /** The election's name. */
  name: string;
  /** The value the leader proclaims. */
  value: string;
  /** The leader's owner name. */
  owner: string;
  /** The term: a fencing token greater than every term of the election before. */
  term: bigint;
  /** When the leadership ends unless renewed, by Redis's clock. */
  expireTime: Date;
}

/**
 * A fleet-wide rate: at most limit per periodMs, in bursts of up to burst
 * (default limit). Every caller of a key must give the same rate while its
 * limiter is in use.
 */
export interface Rate {
  limit: number;
  periodMs: number;
  burst?: number;
}

/** Options of LockdClient.take. */
export interface TakeOptions {
  /** What the call spends (default 1). */
  cost?: number;
  /** Gives the call up. */
  signal?: AbortSignal;
}

/** Options of LockdClient.wait. */
export interface WaitOptions extends TakeOptions {
  /** The longest wait for the turn; without it, as long as it takes. */
  waitMs?: number;
}

/** A rate limiter's answer: not allowed is a decision, not an error. */
export interface Decision {
  allowed: boolean;
  /** What could still be spent at once after this call. */
  remaining: number;
  /** How long until the cost would be allowed if nobody else took meanwhile (0 when allowed). */
  retryAfterMs: number;
  /** How long until the limiter is full again. */
  resetAfterMs: number;
}

/** LockdError is a call to lockd that failed, after any retries. */
export class LockdError extends Error {
  constructor(message: string, code: status, details?: string, cause?: unknown);
  /** The gRPC status code. */
  readonly code: status;
  /** The status message lockd sent, if any. */
  readonly details: string | undefined;
}

/**
 * LeaseLostError says a lease (or leadership) is no longer held. It is
 * reported before anyone else can be granted the key; releasing a lost lease
 * rejects with it.
 */
export class LeaseLostError extends LockdError {
  constructor(key: string, reason: string);
  /** The key (or election name) that was lost. */
  readonly key: string;
  /** Why it was lost. */
  readonly reason: string;
}

/**
 * RateLimitedError says a wait's turn would come only after its bound
 * (waitMs): lockd says so at once, rather than at the bound.
 */
export class RateLimitedError extends LockdError {
  constructor(key: string, retryAfterMs: number);
  /** The limiter's key. */
  readonly key: string;
  /** How long until the cost would be allowed if nobody else took meanwhile. */
  readonly retryAfterMs: number;
}

/**
 * Lease is one hold on a key, kept alive until released. It emits 'lost',
 * resolves `lost` and aborts `signal` before anyone else can be granted the key.
 */
export class Lease extends EventEmitter {
  private constructor();
  /** The key this lease holds. */
  readonly key: string;
  /** The lease's opaque id. */
  readonly leaseId: string;
  /** Who holds the lease. */
  readonly owner: string;
  /** 'read', 'write', or 'permit' (one of a semaphore's permits). */
  readonly mode: 'write' | 'read' | 'permit';
  /** The fencing token: greater than every token issued before for this key. */
  readonly fencingToken: bigint;
  /** When the lease was granted, by Redis's clock. */
  readonly grantTime: Date;
  /** Aborted (with the LeaseLostError) when the lease is lost. */
  readonly signal: AbortSignal;
  /** Resolved with the LeaseLostError when the lease is lost. */
  readonly lost: Promise<LeaseLostError>;
  /** True while the lease is neither lost nor released. */
  get held(): boolean;
  /** The LeaseLostError if the lease was lost, else null. */
  get lostError(): LeaseLostError | null;
  /** How many times the owner holds the lease, as of the last renewal. */
  get holdCount(): number;
  /** The span of the last grant or renewal, in milliseconds. */
  get ttlMs(): number;
  /** When the lease runs out unless renewed, by Redis's clock. */
  get expireTime(): Date;
  /** Throws the LeaseLostError if the lease was lost (or an Error if released). */
  checkHeld(): void;
  /** Gives one hold back; rejects with the LeaseLostError if the lease was lost. */
  release(): Promise<void>;
  on(event: 'lost', listener: (err: LeaseLostError) => void): this;
  once(event: 'lost', listener: (err: LeaseLostError) => void): this;
  off(event: 'lost', listener: (err: LeaseLostError) => void): this;
}

/**
 * Leadership is a candidate's leadership of an election, kept alive until
 * resigned; its loss is signalled before another candidate can be elected.
 */
export class Leadership extends EventEmitter {
  private constructor();
  /** The election's name. */
  readonly name: string;
  /** The leader's owner name. */
  readonly owner: string;
  /** The leadership's lease id (for LockService calls). */
  readonly leaseId: string;
  /** The term: a fencing token greater than every term of the election before. */
  readonly term: bigint;
  /** The value the leader proclaims. */
  readonly value: string;
  /** When this candidate was elected, by Redis's clock. */
  readonly electedTime: Date;
  /** Aborted (with the LeaseLostError) when the leadership is lost. */
  readonly signal: AbortSignal;
  /** Resolved with the LeaseLostError when the leadership is lost. */
  readonly lost: Promise<LeaseLostError>;
  /** True while the leadership is neither lost nor resigned. */
  get isLeader(): boolean;
  /** The LeaseLostError if the leadership was lost, else null. */
  get lostError(): LeaseLostError | null;
  /** When the leadership ends unless renewed, by Redis's clock, as last confirmed. */
  get expireTime(): Date;
  /** Throws unless still leader. */
  checkLeader(): void;
  /** Sets the leader's value, for observers to see. */
  proclaim(value: string): Promise<void>;
  /** Ends the leadership at once; rejects with the LeaseLostError if it was lost. */
  resign(): Promise<void>;
  on(event: 'lost', listener: (err: LeaseLostError) => void): this;
  once(event: 'lost', listener: (err: LeaseLostError) => void): this;
  off(event: 'lost', listener: (err: LeaseLostError) => void): this;
}

/** ElectionObserver follows an election: 'change' with the leader, or null for none. */
export class ElectionObserver extends EventEmitter {
  private constructor();
  /** The election's name. */
  readonly name: string;
  /** Stops observing. */
  close(): void;
  on(event: 'change', listener: (leader: LeaderInfo | null) => void): this;
  on(event: 'error', listener: (err: LockdError) => void): this;
  on(event: 'closed', listener: () => void): this;
  once(event: 'change', listener: (leader: LeaderInfo | null) => void): this;
  once(event: 'error', listener: (err: LockdError) => void): this;
  once(event: 'closed', listener: () => void): this;
  off(event: 'change', listener: (leader: LeaderInfo | null) => void): this;
  off(event: 'error', listener: (err: LockdError) => void): this;
  off(event: 'closed', listener: () => void): this;
}

/** LockdClient talks to one or more lockd replicas. */
export class LockdClient {
  constructor(opts: LockdClientOptions);
  /** Takes a lease on key if it can be had within waitMs (default 0: try once); null when the key stayed busy. */
  tryAcquire(key: string, opts?: TryAcquireOptions): Promise<Lease | null>;
  /** Takes a lease on key, waiting as long as it takes. */
  acquire(key: string, opts?: AcquireOptions): Promise<Lease>;
  /** Runs fn while holding key and releases it; rejects with the LeaseLostError if the lease was lost meanwhile. */
  withLock<T>(key: string, fn: (lease: Lease) => T | Promise<T>, opts?: TryAcquireOptions): Promise<T>;
  /** Takes one of limit permits of the semaphore key within waitMs (default 0: try once); null when all stayed held. */
  tryAcquirePermit(key: string, limit: number, opts?: TryPermitOptions): Promise<Lease | null>;
  /** Takes one of limit permits of the semaphore key, waiting as long as it takes. */
  acquirePermit(key: string, limit: number, opts?: PermitOptions): Promise<Lease>;
  /** Runs fn while holding a permit of the semaphore key, as withLock does. */
  withPermit<T>(key: string, limit: number, fn: (permit: Lease) => T | Promise<T>, opts?: TryPermitOptions): Promise<T>;
  /** Enters the election name with value; resolves once elected. */
  campaign(name: string, value: string, opts?: CampaignOptions): Promise<Leadership>;
  /** Campaigns, runs fn for one term and resigns. */
  withLeadership<T>(name: string, value: string, fn: (leadership: Leadership) => T | Promise<T>, opts?: CampaignOptions): Promise<T>;
  /** The current leader of the election name, or null. */
  leader(name: string): Promise<LeaderInfo | null>;
  /** Follows the election name; close() the observer to stop. */
  observe(name: string): ElectionObserver;
  /** The app's current access token. */
  getAccessToken(app: string): Promise<AccessToken>;
  /** Reports a token the upstream rejected and returns the one to use now. */
  refreshAccessToken(app: string, invalidToken: string): Promise<AccessToken>;
  /** Spends cost from key's fleet-wide rate limiter if rate allows it now. */
  take(key: string, rate: Rate, opts?: TakeOptions): Promise<Decision>;
  /** Spends cost from key's rate limiter, waiting for its turn in order; rejects with a RateLimitedError when the turn would come after opts.waitMs. */
  wait(key: string, rate: Rate, opts?: WaitOptions): Promise<Decision>;
  /** Stops observers, resigns leaderships, releases leases still open and closes the connections. */
  close(): Promise<void>;
}
