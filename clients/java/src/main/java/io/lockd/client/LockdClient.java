package io.lockd.client;

import io.grpc.ManagedChannel;
import io.lockd.v1.AcquireRequest;
import io.lockd.v1.AcquireResponse;
import io.lockd.v1.CampaignRequest;
import io.lockd.v1.ElectionServiceGrpc;
import io.lockd.v1.LeaderRequest;
import io.lockd.v1.LeaderResponse;
import io.lockd.v1.LockServiceGrpc;
import io.lockd.v1.RLockRequest;
import io.lockd.v1.RLockResponse;
import io.lockd.v1.ReleaseRequest;
import io.lockd.v1.ResignRequest;
import io.lockd.v1.SemaphoreServiceAcquireRequest;
import io.lockd.v1.SemaphoreServiceAcquireResponse;
import io.lockd.v1.SemaphoreServiceGrpc;
import io.grpc.Status;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Lock;
import java.util.concurrent.locks.ReadWriteLock;
import java.util.function.Consumer;
import java.util.function.Supplier;

/**
 * LockdClient talks to one or more lockd replicas (a sidecar on loopback, or a pool).
 *
 * <pre>{@code
 * try (LockdClient lockd = LockdClient.builder().target("127.0.0.1:50051").build()) {
 *   try (Lease lease = lockd.acquire("orders/42")) {
 *     write(order, lease.fencingToken());
 *   }
 * }
 * }</pre>
 *
 * <p>Calls go to one target at a time; on {@code UNAVAILABLE} they are retried (with the same
 * request_id, so nothing is done twice) on the next target, and KeepAlive streams resume there.
 * A client is safe for use by many threads; make one per process and close it at shutdown, which
 * releases the leases still open.
 */
public final class LockdClient implements AutoCloseable {
  private static final long MAX_WAIT_CHUNK = TimeUnit.SECONDS.toNanos(60);

  private final Transport transport;
  private final Duration defaultTtl;
  private final String ownerPrefix;
  private final Set<Lease> open = ConcurrentHashMap.newKeySet();
  private final Set<Leadership> leading = ConcurrentHashMap.newKeySet();
  final ConcurrentHashMap<String, LockdLock.Hold> holds = new ConcurrentHashMap<>();

  private LockdClient(Builder b) {
    List<ManagedChannel> channels =
        ClientChannels.open(b.targets, b.tls, b.trust, b.clientCert, b.clientKey, b.authority);
    ScheduledThreadPoolExecutor scheduler =
        new ScheduledThreadPoolExecutor(1, daemon("lockd-client-timer"));
    scheduler.setRemoveOnCancelPolicy(true);
    ExecutorService callbacks = Executors.newCachedThreadPool(daemon("lockd-client-callback"));
    this.transport =
        new Transport(
            List.copyOf(b.targets),
            channels,
            b.token == null ? null : new BearerToken(b.token),
            scheduler,
            callbacks,
            b.callTimeout.toNanos(),
            b.retryTimeout.toNanos());
    this.defaultTtl = b.defaultTtl;
    this.ownerPrefix =
        (b.ownerPrefix != null ? b.ownerPrefix : hostAndPid())
            + ":"
            + UUID.randomUUID().toString().substring(0, 8);
  }

  /** Starts building a client. */
  public static Builder builder() {
    return new Builder();
  }

  /**
   * Takes a lease on key (write mode, default ttl, a fresh owner), waiting as long as it takes.
   *
   * @throws InterruptedException when interrupted while waiting
   * @throws LockdException when lockd refuses (for example PERMISSION_DENIED) or stays unreachable
   */
  public Lease acquire(String key) throws InterruptedException {
    return acquire(key, LeaseOptions.write());
  }

  /** Takes a lease on key with options, waiting as long as it takes. */
  public Lease acquire(String key, LeaseOptions options) throws InterruptedException {
    while (true) {
      Optional<Lease> l = tryAcquireNanos(key, MAX_WAIT_CHUNK, options);
      if (l.isPresent()) {
        return l.get();
      }
    }
  }

  /**
   * Takes a lease on key (write mode, default ttl, a fresh owner) if it can be had within wait;
   * zero tries once. Empty when the key stayed busy.
   */
  public Optional<Lease> tryAcquire(String key, Duration wait) throws InterruptedException {
    return tryAcquire(key, wait, LeaseOptions.write());
  }

  /** Takes a lease on key with options if it can be had within wait; zero tries once. */
  public Optional<Lease> tryAcquire(String key, Duration wait, LeaseOptions options)
      throws InterruptedException {
    long end = System.nanoTime() + wait.toNanos();
    while (true) {
      long left = Math.max(0, end - System.nanoTime());
      Optional<Lease> l = tryAcquireNanos(key, Math.min(left, MAX_WAIT_CHUNK), options);
      if (l.isPresent() || left <= MAX_WAIT_CHUNK) {
        return l;
      }
    }
  }

  /**
   * A {@link Lock} on key: exclusive across every process using lockd, reentrant per thread. See
   * {@link LockdLock}.
   */
  public LockdLock asLock(String key) {
    return new LockdLock(this, key, LeaseOptions.Mode.WRITE);
  }

  /** A {@link ReadWriteLock} on key: many readers or one writer, reentrant per thread. */
  public ReadWriteLock asReadWriteLock(String key) {
    LockdLock read = new LockdLock(this, key, LeaseOptions.Mode.READ);
    LockdLock write = new LockdLock(this, key, LeaseOptions.Mode.WRITE);
    return new ReadWriteLock() {
      @Override
      public Lock readLock() {
        return read;
      }

      @Override
      public Lock writeLock() {
        return write;
      }
    };
  }

  /** The access_token calls (lockd.v1.TokenService) over this client's connections. */
  public TokenClient tokens() {
    return new TokenClient(transport);
  }

  /**
   * The fleet-wide rate limiter of key (lockd.v1.RateLimitService) at rate. See {@link
   * LockdRateLimiter}.
   */
  public LockdRateLimiter rateLimiter(String key, Rate rate) {
    return new LockdRateLimiter(transport, key, rate);
  }

  /**
   * Takes one of the limit permits of the semaphore key (default ttl, a fresh owner), waiting as
   * long as it takes. The permit is a lease like a lock's: kept alive until closed, with its own
   * fencing token and loss signal; at most limit permits of key are held at once, by every holder
   * together, who must all give the same limit ({@code FAILED_PRECONDITION} otherwise). The permit
   * of a holder that dies comes back when its lease runs out.
   */
  public Lease acquirePermit(String key, int limit) throws InterruptedException {
    return acquirePermit(key, limit, LeaseOptions.write());
  }

  /** Takes a permit of the semaphore key with options (ttl, owner; the mode is ignored). */
  public Lease acquirePermit(String key, int limit, LeaseOptions options)
      throws InterruptedException {
    while (true) {
      Optional<Lease> l = tryPermitNanos(key, limit, MAX_WAIT_CHUNK, options);
      if (l.isPresent()) {
        return l.get();
      }
    }
  }

  /** Takes a permit of the semaphore key if one comes free within wait; zero tries once. */
  public Optional<Lease> tryAcquirePermit(String key, int limit, Duration wait)
      throws InterruptedException {
    return tryAcquirePermit(key, limit, wait, LeaseOptions.write());
  }

  /** Takes a permit of the semaphore key with options if one comes free within wait. */
  public Optional<Lease> tryAcquirePermit(
      String key, int limit, Duration wait, LeaseOptions options) throws InterruptedException {
    long end = System.nanoTime() + wait.toNanos();
    while (true) {
      long left = Math.max(0, end - System.nanoTime());
      Optional<Lease> l = tryPermitNanos(key, limit, Math.min(left, MAX_WAIT_CHUNK), options);
      if (l.isPresent() || left <= MAX_WAIT_CHUNK) {
        return l;
      }
    }
  }

  /**
   * A semaphore of limit permits on key, in the manner of {@link java.util.concurrent.Semaphore}.
   * See {@link LockdSemaphore}.
   */
  public LockdSemaphore asSemaphore(String key, int limit) {
    return new LockdSemaphore(this, key, checkLimit(limit), LeaseOptions.write());
  }

  /** A semaphore of limit permits on key whose permits take options (ttl, owner). */
  public LockdSemaphore asSemaphore(String key, int limit, LeaseOptions options) {
    return new LockdSemaphore(this, key, checkLimit(limit), options);
  }

  /**
   * Enters the election name with value and waits until elected (default ttl, a fresh owner).
   * While it waits, a replica that goes away is left for the next; once elected, the leadership
   * lives and dies with its Campaign stream (see {@link Leadership}).
   *
   * @throws InterruptedException when interrupted while waiting; nothing is left behind
   * @throws LockdException when lockd refuses (for example PERMISSION_DENIED) or stays unreachable
   */
  public Leadership campaign(String name, String value) throws InterruptedException {
    return campaign(name, value, LeaseOptions.write());
  }

  /** Enters the election name with value and options (ttl, owner; the mode is ignored). */
  public Leadership campaign(String name, String value, LeaseOptions options)
      throws InterruptedException {
    Objects.requireNonNull(name, "name");
    String owner =
        options.owner().isEmpty() ? ownerPrefix + ":" + UUID.randomUUID() : options.owner();
    CampaignRequest req =
        CampaignRequest.newBuilder()
            .setName(name)
            .setValue(Objects.requireNonNull(value, "value"))
            .setOwner(owner)
            .setTtl(proto(options.ttl() != null ? options.ttl() : defaultTtl))
            .build();
    return Leadership.campaign(this, transport, req, leading::add);
  }

  /** The current leader of the election name; empty when it has none. */
  public Optional<LeaderInfo> leader(String name) throws InterruptedException {
    try {
      LeaderResponse r =
          transport.call(
              "Leader " + name,
              ElectionServiceGrpc.getLeaderMethod(),
              left -> LeaderRequest.newBuilder().setName(name).build(),
              0);
      return Optional.of(new LeaderInfo(r.getLeader()));
    } catch (LockdException e) {
      if (e.code() == Status.Code.NOT_FOUND) {
        return Optional.empty();
      }
      throw e;
    }
  }

  /**
   * Follows the election name: listener gets the current state at once (the leader, or empty for
   * none), then each change (a new leader, a new value, no leader), one at a time on a client
   * thread, terms never going back. Close the observer to stop.
   */
  public ElectionObserver observe(String name, Consumer<Optional<LeaderInfo>> listener) {
    ElectionObserver o =
        new ElectionObserver(transport, Objects.requireNonNull(name, "name"), listener);
    o.open();
    return o;
  }

  /**
   * A {@link LeaderLatch} for the election name with value (default ttl, a fresh owner per term);
   * call {@link LeaderLatch#start()} to campaign.
   */
  public LeaderLatch leaderLatch(String name, String value) {
    return new LeaderLatch(this, name, value, LeaseOptions.write());
  }

  /** A {@link LeaderLatch} whose campaigns take options (ttl, owner). */
  public LeaderLatch leaderLatch(String name, String value, LeaseOptions options) {
    return new LeaderLatch(this, name, value, options);
  }

  /** Resigns every leadership, releases every lease still open and closes the connections. */
  @Override
  public void close() {
    for (Leadership l : List.copyOf(leading)) {
      try {
        l.close();
      } catch (LeaseLostException lost) {
        // Lost meanwhile, and reported through its own lost().
      }
    }
    for (Lease l : List.copyOf(open)) {
      l.discard();
    }
    for (Lease l : List.copyOf(open)) {
      l.abandon();
    }
    transport.shutdown();
  }

  private Optional<Lease> tryPermitNanos(String key, int limit, long waitNanos, LeaseOptions o)
      throws InterruptedException {
    return tryAcquireNanos(key, waitNanos, o, checkLimit(limit));
  }

  private static int checkLimit(int limit) {
    if (limit < 1) {
      throw new IllegalArgumentException("a semaphore's limit must be at least 1, got " + limit);
    }
    return limit;
  }

  private Optional<Lease> tryAcquireNanos(String key, long waitNanos, LeaseOptions o)
      throws InterruptedException {
    if (o.mode() == LeaseOptions.Mode.PERMIT) {
      throw new IllegalArgumentException("take permits with acquirePermit or asSemaphore");
    }
    return tryAcquireNanos(key, waitNanos, o, 0);
  }

  // tryAcquireNanos takes a lock, or a permit of a semaphore of limit when limit > 0.
  private Optional<Lease> tryAcquireNanos(String key, long waitNanos, LeaseOptions o, int limit)
      throws InterruptedException {
    Objects.requireNonNull(key, "key");
    String requestId = UUID.randomUUID().toString();
    // A fresh owner of the client's own when none is asked for: lockd
    // replays a retried request_id only to the owner that sent it.
    String owner = o.owner().isEmpty() ? ownerPrefix + ":" + UUID.randomUUID() : o.owner();
    com.google.protobuf.Duration ttl = proto(o.ttl() != null ? o.ttl() : defaultTtl);
    long sent = System.nanoTime();
    io.lockd.v1.Lease granted;
    if (limit > 0) {
      SemaphoreServiceAcquireResponse r =
          transport.call(
              "SemaphoreService.Acquire " + key,
              SemaphoreServiceGrpc.getAcquireMethod(),
              left ->
                  SemaphoreServiceAcquireRequest.newBuilder()
                      .setKey(key)
                      .setLimit(limit)
                      .setOwner(owner)
                      .setTtl(ttl)
                      .setWaitTimeout(proto(left))
                      .setRequestId(requestId)
                      .build(),
              waitNanos);
      if (!r.getAcquired()) {
        return Optional.empty();
      }
      granted = r.getLease();
    } else if (o.mode() == LeaseOptions.Mode.READ) {
      RLockResponse r =
          transport.call(
              "RLock " + key,
              LockServiceGrpc.getRLockMethod(),
              left ->
                  RLockRequest.newBuilder()
                      .setKey(key)
                      .setOwner(owner)
                      .setTtl(ttl)
                      .setWaitTimeout(proto(left))
                      .setRequestId(requestId)
                      .build(),
              waitNanos);
      if (!r.getAcquired()) {
        return Optional.empty();
      }
      granted = r.getLease();
    } else {
      AcquireResponse r =
          transport.call(
              "Acquire " + key,
              LockServiceGrpc.getAcquireMethod(),
              left ->
                  AcquireRequest.newBuilder()
                      .setKey(key)
                      .setOwner(owner)
                      .setTtl(ttl)
                      .setWaitTimeout(proto(left))
                      .setRequestId(requestId)
                      .build(),
              waitNanos);
      if (!r.getAcquired()) {
        return Optional.empty();
      }
      granted = r.getLease();
    }
    Lease lease = new Lease(this, transport, granted, sent);
    open.add(lease);
    lease.start(granted);
    return Optional.of(lease);
  }

  /** Gives one hold of a lease back, retried safely (request_id) on UNAVAILABLE. */
  void release(String key, String leaseId) throws InterruptedException {
    String requestId = UUID.randomUUID().toString();
    transport.call(
        "Release " + key,
        LockServiceGrpc.getReleaseMethod(),
        left ->
            ReleaseRequest.newBuilder()
                .setKey(key)
                .setLeaseId(leaseId)
                .setRequestId(requestId)
                .build(),
        0);
  }

  void forget(Lease l) {
    open.remove(l);
  }

  void forget(Leadership l) {
    leading.remove(l);
  }

  /** Ends the leadership leaseId of name. */
  void resign(String name, String leaseId) throws InterruptedException {
    transport.call(
        "Resign " + name,
        ElectionServiceGrpc.getResignMethod(),
        left -> ResignRequest.newBuilder().setName(name).setLeaseId(leaseId).build(),
        0);
  }

  /** The owner the current thread's locks are held as. */
  String threadOwner() {
    return ownerPrefix + ":" + Thread.currentThread().getId();
  }

  static com.google.protobuf.Duration proto(Duration d) {
    return com.google.protobuf.Duration.newBuilder()
        .setSeconds(d.getSeconds())
        .setNanos(d.getNano())
        .build();
  }

  static com.google.protobuf.Duration proto(long nanos) {
    return com.google.protobuf.Duration.newBuilder()
        .setSeconds(nanos / 1_000_000_000L)
        .setNanos((int) (nanos % 1_000_000_000L))
        .build();
  }

  private static String hostAndPid() {
    String host;
    try {
      host = InetAddress.getLocalHost().getHostName();
    } catch (IOException e) {
      host = "localhost";
    }
    return host + ":" + ProcessHandle.current().pid();
  }

  private static ThreadFactory daemon(String name) {
    AtomicInteger n = new AtomicInteger();
    return r -> {
      Thread t = new Thread(r, name + "-" + n.incrementAndGet());
      t.setDaemon(true);
      return t;
    };
  }

  /** Builder configures a {@link LockdClient}. */
  public static final class Builder {
    private final List<String> targets = new ArrayList<>();
    private Supplier<String> token;
    private boolean tls;
    private Path trust;
    private Path clientCert;
    private Path clientKey;
    private String authority;
    private Duration callTimeout = Duration.ofSeconds(10);
    private Duration retryTimeout = Duration.ofSeconds(15);
    private Duration defaultTtl = Duration.ofSeconds(30);
    private String ownerPrefix;

    private Builder() {}

    /**
     * Adds a lockd address ({@code host:port}, or any gRPC target such as {@code dns:///lockd:50051}).
     * Calls go to the first; the others take over when it is unavailable.
     */
    public Builder target(String target) {
      targets.add(Objects.requireNonNull(target));
      return this;
    }

    /** Adds several lockd addresses, in order of preference. */
    public Builder targets(List<String> targets) {
      targets.forEach(this::target);
      return this;
    }

    /** Sends {@code authorization: Bearer <token>} with every call. */
    public Builder bearerToken(String token) {
      Objects.requireNonNull(token);
      this.token = () -> token;
      return this;
    }

    /** Reads the bearer token from file, again whenever the file changes. */
    public Builder bearerTokenFile(Path file) {
      this.token = BearerToken.fromFile(file);
      return this;
    }

    /** Uses TLS, trusting the system's certificate authorities. */
    public Builder tls() {
      this.tls = true;
      return this;
    }

    /** Uses TLS, trusting the certificate authorities in a PEM file. */
    public Builder tlsTrust(Path caPem) {
      this.tls = true;
      this.trust = caPem;
      return this;
    }

    /** Uses mutual TLS: presents this certificate chain and PKCS#8 key (PEM files). */
    public Builder tlsClientCertificate(Path certChainPem, Path keyPem) {
      this.tls = true;
      this.clientCert = certChainPem;
      this.clientKey = keyPem;
      return this;
    }

    /** The server name TLS verifies instead of the target's host. */
    public Builder tlsAuthority(String authority) {
      this.authority = authority;
      return this;
    }

    /**
     * The deadline of each attempt of a call, beyond the time it asked to wait for a lock
     * (default 10s). An attempt that runs past it is retried on the next target.
     */
    public Builder callTimeout(Duration d) {
      this.callTimeout = positive(d, "callTimeout");
      return this;
    }

    /** How long calls keep being retried on UNAVAILABLE, beyond their wait (default 15s). */
    public Builder retryTimeout(Duration d) {
      this.retryTimeout = positive(d, "retryTimeout");
      return this;
    }

    /** The ttl of leases whose options set none (default 30s). */
    public Builder defaultTtl(Duration d) {
      this.defaultTtl = positive(d, "defaultTtl");
      return this;
    }

    /**
     * What owners of {@link LockdLock} holds start with (default {@code host:pid}); a random id
     * and the thread's id follow it.
     */
    public Builder ownerPrefix(String prefix) {
      this.ownerPrefix = Objects.requireNonNull(prefix);
      return this;
    }

    /** Builds the client; connections are made on first use. */
    public LockdClient build() {
      if (targets.isEmpty()) {
        throw new IllegalStateException("no target: call target(\"127.0.0.1:50051\")");
      }
      return new LockdClient(this);
    }

    private static Duration positive(Duration d, String what) {
      if (d.isNegative() || d.isZero()) {
        throw new IllegalArgumentException(what + " must be positive, got " + d);
      }
      return d;
    }
  }
}
