package io.lockd.client;

import io.grpc.Status;

/**
 * LeaseLostException says a lease is no longer held: lockd ended its KeepAlive stream with
 * {@code NOT_FOUND}, or no renewal was confirmed in time before the lease could run out. It is
 * reported before anyone else can be granted the key, so work guarded by the lease can stop.
 */
public final class LeaseLostException extends LockdException {
  private static final long serialVersionUID = 1L;

  private final String key;

  LeaseLostException(String key, String reason) {
    super("lease on " + key + " lost: " + reason, null, Status.NOT_FOUND.withDescription(reason));
    this.key = key;
  }

  /** The key whose lease was lost. */
  public String key() {
    return key;
  }
}
