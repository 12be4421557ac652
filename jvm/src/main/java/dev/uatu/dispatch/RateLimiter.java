package dev.uatu.dispatch;

/**
 * A reservation rate limiter (Guava's SmoothBursty, written out so the semantics are ours): a
 * caller reserves permits and is told how long to wait before acting. A reader thread sleeps
 * that long; a retry scheduled from a callback is simply started that much later, so nothing
 * spins and no thread blocks on a callback path.
 *
 * <p>Unused capacity is stored for at most {@code burstSeconds}, so over any window of T
 * seconds the permits granted are at most rate x (T + burstSeconds) plus one request: with the
 * default 0.2 s burst, a 10 s window sees at most 2% over the rate (plus one record's bytes for
 * a byte limit). A request larger than the stored permits goes at once and pushes its cost onto
 * the next caller, so a single large record never waits forever.
 */
public final class RateLimiter {
  private final double permitsPerSecond;
  private final double maxStored;
  private final double nanosPerPermit;
  private double stored;
  private long nextFreeNanos;

  public RateLimiter(double permitsPerSecond, double burstSeconds, long nowNanos) {
    if (permitsPerSecond <= 0) {
      throw new IllegalArgumentException("rate must be > 0: " + permitsPerSecond);
    }
    this.permitsPerSecond = permitsPerSecond;
    this.maxStored = Math.max(1.0, permitsPerSecond * burstSeconds);
    this.nanosPerPermit = 1e9 / permitsPerSecond;
    this.stored = 0;
    this.nextFreeNanos = nowNanos;
  }

  public double rate() {
    return permitsPerSecond;
  }

  /** Reserves {@code permits} and returns how many nanoseconds the caller must wait first. */
  public synchronized long reserve(double permits, long nowNanos) {
    if (nowNanos > nextFreeNanos) {
      stored = Math.min(maxStored, stored + (nowNanos - nextFreeNanos) / nanosPerPermit);
      nextFreeNanos = nowNanos;
    }
    long wait = nextFreeNanos - nowNanos;
    double fromStored = Math.min(permits, stored);
    double fresh = permits - fromStored;
    stored -= fromStored;
    nextFreeNanos += (long) (fresh * nanosPerPermit);
    return wait;
  }
}
