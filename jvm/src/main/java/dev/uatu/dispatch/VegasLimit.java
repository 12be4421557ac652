package dev.uatu.dispatch;

/**
 * An adaptive concurrency limit in the style of TCP Vegas, as Netflix's concurrency-limits
 * {@code VegasLimit} (which uForwarder uses when max_inflight_messages is 0 or less).
 *
 * <p>It keeps the lowest round-trip time seen (the "no-load" RTT) and, from each completed call,
 * estimates how many calls are queued at the service: {@code queue = limit x (1 - rtt_noload /
 * rtt)}. A short queue (at most log10(limit)) grows the limit by 6 log10(limit); below 3
 * log10(limit) by log10(limit); a queue above 6 log10(limit), or a dropped call (timeout or
 * unusable answer), shrinks it by log10(limit). A limit the dispatcher is not using (fewer than
 * half its permits held) is not raised. The limit stays within [1, hardMax]; the no-load RTT is
 * re-measured every 1,000 samples so a service that got slower for good is not held to an old
 * best.
 */
public final class VegasLimit {
  static final int INITIAL = 20;
  private static final int PROBE_EVERY = 1000;
  private final int hardMax;
  private double limit = INITIAL;
  private long rttNoLoad = Long.MAX_VALUE;
  private int samples;

  public VegasLimit(int hardMax) {
    this.hardMax = Math.max(1, hardMax);
    this.limit = Math.min(INITIAL, this.hardMax);
  }

  public int limit() {
    return (int) limit;
  }

  /** One completed call: its RTT, the permits held when it completed, whether it dropped. */
  public int onSample(long rttNanos, int inflight, boolean dropped) {
    if (++samples % PROBE_EVERY == 0) {
      rttNoLoad = Long.MAX_VALUE;
    }
    if (rttNanos > 0 && rttNanos < rttNoLoad) {
      rttNoLoad = rttNanos;
    }
    double log = Math.max(1.0, Math.log10(limit));
    double next = limit;
    if (dropped) {
      next = limit - log;
    } else if (inflight * 2 < limit) {
      return (int) limit; // not limited by us: no evidence either way
    } else {
      double queue = Math.ceil(limit * (1.0 - (double) rttNoLoad / Math.max(rttNanos, 1)));
      if (queue <= log) {
        next = limit + 6 * log;
      } else if (queue < 3 * log) {
        next = limit + log;
      } else if (queue > 6 * log) {
        next = limit - log;
      }
    }
    limit = Math.max(1.0, Math.min(hardMax, next));
    return (int) limit;
  }
}
