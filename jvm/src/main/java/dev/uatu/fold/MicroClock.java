package dev.uatu.fold;

/**
 * Epoch time in microseconds: the wall clock, with the microseconds below its millisecond
 * taken from {@link System#nanoTime}. Cheap enough to read per record, and finer than {@link
 * System#currentTimeMillis}; two JVMs on one machine agree to within the wall clock's own
 * resolution.
 *
 * <p>The reading is anchored to the wall clock and advanced by the monotonic clock, and
 * anchored again whenever the two disagree by more than {@link #TOLERANCE_MICROS}: a JVM that
 * lives for days (a worker application) sees the wall clock slewed by NTP, stepped, or moved
 * on after the host was suspended (when the monotonic clock stood still), and a send or fetch
 * time read from an anchor taken once would drift from the other hosts' clocks by as much.
 */
public final class MicroClock {
  /** The disagreement beyond which the reading follows the wall clock again. */
  public static final long TOLERANCE_MICROS = 1_000L;

  private static final MicroClock SYSTEM =
      new MicroClock(System.currentTimeMillis(), System.nanoTime());

  private volatile long[] anchor; // {epoch micros, nanoTime} of one moment

  /** A clock anchored at wall clock {@code wallMillis} when nanoTime read {@code nanos}. */
  public MicroClock(long wallMillis, long nanos) {
    this.anchor = new long[] {wallMillis * 1000L, nanos};
  }

  public static long nowMicros() {
    return SYSTEM.read(System.currentTimeMillis(), System.nanoTime());
  }

  /** The epoch microsecond at which {@link System#nanoTime} will read (or read) {@code nanos}. */
  public static long toMicros(long nanos) {
    return anchored(SYSTEM.anchor, nanos);
  }

  /** The {@link System#nanoTime} reading at epoch microsecond {@code micros}. */
  public static long toNanos(long micros) {
    long[] a = SYSTEM.anchor;
    return a[1] + (micros - a[0]) * 1000L;
  }

  /**
   * The epoch microsecond of the moment at which the wall clock read {@code wallMillis} and the
   * monotonic clock {@code nanos}: the anchored reading while it lies within the wall clock's
   * millisecond (give or take the tolerance), else the wall clock's, from a new anchor.
   */
  public long read(long wallMillis, long nanos) {
    long micros = anchored(anchor, nanos);
    long wallMicros = wallMillis * 1000L;
    // The wall clock truncates to its millisecond: the true time is in [wall, wall + 1000).
    if (micros < wallMicros - TOLERANCE_MICROS || micros >= wallMicros + 1000L + TOLERANCE_MICROS) {
      anchor = new long[] {wallMicros, nanos};
      return wallMicros;
    }
    return micros;
  }

  /** The epoch microsecond of monotonic reading {@code nanos}, from anchor {@code a}. */
  private static long anchored(long[] a, long nanos) {
    return a[0] + (nanos - a[1]) / 1000L;
  }
}
