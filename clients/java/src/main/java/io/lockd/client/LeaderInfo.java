package io.lockd.client;

import java.time.Instant;
import java.util.Objects;

/** LeaderInfo describes an election's leader, as anyone may see it. Instances are immutable. */
public final class LeaderInfo {
  private final String name;
  private final String value;
  private final String owner;
  private final long term;
  private final Instant expireTime;

  LeaderInfo(io.lockd.v1.Leader l) {
    this.name = l.getName();
    this.value = l.getValue();
    this.owner = l.getOwner();
    this.term = l.getTerm();
    this.expireTime =
        Instant.ofEpochSecond(l.getExpireTime().getSeconds(), l.getExpireTime().getNanos());
  }

  /** The election's name. */
  public String name() {
    return name;
  }

  /** What the leader proclaims (for example its address). */
  public String value() {
    return value;
  }

  /** The leader's owner name, as it named itself when campaigning. */
  public String owner() {
    return owner;
  }

  /** The leadership's term: a fencing token greater than every term of the election before. */
  public long term() {
    return term;
  }

  /** When the leadership ends unless renewed, by Redis's clock. */
  public Instant expireTime() {
    return expireTime;
  }

  /** Whether o is the same leadership with the same value (expiry aside). */
  boolean sameAs(LeaderInfo o) {
    return o != null && term == o.term && value.equals(o.value) && owner.equals(o.owner);
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof LeaderInfo && sameAs((LeaderInfo) o) && name.equals(((LeaderInfo) o).name);
  }

  @Override
  public int hashCode() {
    return Objects.hash(name, value, owner, term);
  }

  @Override
  public String toString() {
    return "LeaderInfo{name=" + name + ", value=" + value + ", owner=" + owner + ", term="
        + Long.toUnsignedString(term) + "}";
  }
}
