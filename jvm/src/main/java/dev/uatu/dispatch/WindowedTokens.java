package dev.uatu.dispatch;

/**
 * uForwarder's WindowedTokenLimiter: tokens are credited (one per successfully resolved
 * message) and spent by rare actions (rerouting a head-of-line message, sending a timed-out
 * message to the DLQ); credits older than the window (5 minutes) expire, and {@code freeTokens}
 * are granted on top in every window so a partition with no successes is not stuck forever.
 * The window is kept as 10 buckets.
 */
public final class WindowedTokens {
  private static final int BUCKETS = 10;
  private final long bucketNanos;
  private final long freeTokens;
  private final long[] counts = new long[BUCKETS];
  private final long[] bucketIds = new long[BUCKETS];

  public WindowedTokens(long windowMillis, long freeTokens) {
    this.bucketNanos = Math.max(1, windowMillis * 1_000_000L / BUCKETS);
    this.freeTokens = freeTokens;
  }

  public synchronized void credit(long n, long nowNanos) {
    add(n, nowNanos);
  }

  public synchronized boolean tryAcquire(long n, long nowNanos) {
    if (total(nowNanos) + freeTokens < n) {
      return false;
    }
    add(-n, nowNanos);
    return true;
  }

  public synchronized long available(long nowNanos) {
    return total(nowNanos) + freeTokens;
  }

  private void add(long n, long nowNanos) {
    long id = nowNanos / bucketNanos;
    int slot = (int) Math.floorMod(id, (long) BUCKETS);
    if (bucketIds[slot] != id) {
      bucketIds[slot] = id;
      counts[slot] = 0;
    }
    counts[slot] += n;
  }

  private long total(long nowNanos) {
    long id = nowNanos / bucketNanos;
    long sum = 0;
    for (int i = 0; i < BUCKETS; i++) {
      if (id - bucketIds[i] < BUCKETS) {
        sum += counts[i];
      }
    }
    return sum;
  }
}
