package io.lockd.client;

import java.time.Duration;
import java.util.Objects;

/**
 * LeaseOptions say how to take a lease: the mode (write unless {@link #read()}), its ttl (the
 * client's default unless set) and its owner (a fresh, unique owner unless set; the same owner
 * taking the same key and mode again re-enters its lease). Instances are immutable.
 */
public final class LeaseOptions {
  /** Mode is how a lease holds its key. */
  public enum Mode {
    /** READ is a shared hold: readers exclude writers only. */
    READ,
    /** WRITE is an exclusive hold. */
    WRITE,
    /** PERMIT is one of a semaphore's permits (see {@link LockdClient#acquirePermit}). */
    PERMIT
  }

  private static final LeaseOptions WRITE = new LeaseOptions(Mode.WRITE, null, "");
  private static final LeaseOptions READ = new LeaseOptions(Mode.READ, null, "");

  private final Mode mode;
  private final Duration ttl;
  private final String owner;

  private LeaseOptions(Mode mode, Duration ttl, String owner) {
    this.mode = mode;
    this.ttl = ttl;
    this.owner = owner;
  }

  /** An exclusive (write) lease with the client's default ttl and a fresh owner. */
  public static LeaseOptions write() {
    return WRITE;
  }

  /** A shared (read) lease with the client's default ttl and a fresh owner. */
  public static LeaseOptions read() {
    return READ;
  }

  /** These options with the lease's ttl: it runs out this long after its last renewal. */
  public LeaseOptions ttl(Duration ttl) {
    if (ttl.isNegative() || ttl.isZero()) {
      throw new IllegalArgumentException("ttl must be positive, got " + ttl);
    }
    return new LeaseOptions(mode, ttl, owner);
  }

  /** These options with the owner that holds the lease (for example host:pid:thread). */
  public LeaseOptions owner(String owner) {
    return new LeaseOptions(mode, ttl, Objects.requireNonNull(owner));
  }

  /** The mode. */
  public Mode mode() {
    return mode;
  }

  /** The ttl, or null for the client's default. */
  public Duration ttl() {
    return ttl;
  }

  /** The owner; empty means a fresh, unique owner. */
  public String owner() {
    return owner;
  }
}
