package dev.uatu.audit.report;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;

/**
 * Matches a producer's acknowledgements to its sends by (topic, timestamp, key size, value
 * size), first sent first matched, to give each acknowledged record the dedupe key hashed when
 * it was sent. Thread-safe.
 *
 * <p>Why this shape: the sending thread limits a fast producer, so a send only appends six
 * primitives to a log under a short lock (no object per record). The acknowledging thread (the
 * producer's I/O thread) takes the log in blocks into per-signature queues of primitives; the
 * previous acknowledgement's queue is reused without a map lookup, as consecutive records
 * mostly share a signature.
 */
public final class SendMatcher {
  /** What {@link #match} returns when no send matches. */
  public static final long NO_MATCH = Long.MIN_VALUE;

  private final Object logLock = new Object();
  private SendLog incoming = new SendLog(); // guarded by logLock
  private SendLog taking = new SendLog(); // guarded by this
  private final Map<Signature, Run> runs = new HashMap<>(); // guarded by this
  private final Signature probe = new Signature(null, 0, 0, 0);
  private Run lastRun;

  /** Records a send (key and value sizes -1 for null). */
  public void sent(String topic, long timestampMs, int keySize, int valueSize, long hash, long nowMs) {
    synchronized (logLock) {
      incoming.add(topic, timestampMs, keySize, valueSize, hash, nowMs);
    }
  }

  /**
   * The dedupe key of the oldest unmatched send with this signature, now matched, or {@link
   * #NO_MATCH}. (A record whose key hashes to exactly {@code NO_MATCH} counts as unmatched:
   * one in 2^64.)
   */
  public synchronized long match(String topic, long timestampMs, int keySize, int valueSize) {
    Run run = find(topic, timestampMs, keySize, valueSize);
    if (run == null) {
      takeLog();
      run = find(topic, timestampMs, keySize, valueSize);
      if (run == null) {
        return NO_MATCH;
      }
    }
    long hash = run.pollHash();
    if (run.isEmpty()) {
      runs.remove(run.signature);
      if (run == lastRun) {
        lastRun = null;
      }
    }
    return hash;
  }

  /** Drops sends older than {@code ttlMs} that were never matched. */
  public synchronized void prune(long nowMs, long ttlMs) {
    takeLog();
    Iterator<Run> it = runs.values().iterator();
    while (it.hasNext()) {
      Run run = it.next();
      run.dropOlderThan(nowMs - ttlMs);
      if (run.isEmpty()) {
        it.remove();
      }
    }
    lastRun = null;
  }

  private Run find(String topic, long timestampMs, int keySize, int valueSize) {
    if (lastRun != null && lastRun.signature.is(topic, timestampMs, keySize, valueSize)) {
      return lastRun;
    }
    probe.set(topic, timestampMs, keySize, valueSize);
    Run run = runs.get(probe);
    if (run != null) {
      lastRun = run;
    }
    return run;
  }

  private void takeLog() {
    SendLog log;
    synchronized (logLock) {
      log = incoming;
      incoming = taking;
    }
    Run run = null;
    for (int i = 0; i < log.size; i++) {
      String topic = log.topics[i];
      long ts = log.timestamps[i];
      int ks = log.keySizes[i];
      int vs = log.valueSizes[i];
      if (run == null || !run.signature.is(topic, ts, ks, vs)) {
        probe.set(topic, ts, ks, vs);
        run = runs.get(probe);
        if (run == null) {
          Signature signature = new Signature(topic, ts, ks, vs);
          run = new Run(signature);
          runs.put(signature, run);
        }
      }
      run.add(log.hashes[i], log.sentAt[i]);
    }
    log.clear();
    taking = log;
  }

  /** A signature; mutable only as the lookup probe, never once it is a map key. */
  private static final class Signature {
    private String topic;
    private long timestampMs;
    private int keySize;
    private int valueSize;

    Signature(String topic, long timestampMs, int keySize, int valueSize) {
      set(topic, timestampMs, keySize, valueSize);
    }

    void set(String topic, long timestampMs, int keySize, int valueSize) {
      this.topic = topic;
      this.timestampMs = timestampMs;
      this.keySize = keySize;
      this.valueSize = valueSize;
    }

    boolean is(String topic, long timestampMs, int keySize, int valueSize) {
      return this.timestampMs == timestampMs
          && this.keySize == keySize
          && this.valueSize == valueSize
          && this.topic.equals(topic);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Signature s && is(s.topic, s.timestampMs, s.keySize, s.valueSize);
    }

    @Override
    public int hashCode() {
      int h = topic.hashCode();
      h = 31 * h + Long.hashCode(timestampMs);
      h = 31 * h + keySize;
      return 31 * h + valueSize;
    }
  }

  /** The unmatched sends of one signature, oldest first: (hash, sent at) pairs in a ring. */
  private static final class Run {
    final Signature signature;
    private long[] slots = new long[16];
    private int head; // index of the oldest pair's hash
    private int count; // pairs

    Run(Signature signature) {
      this.signature = signature;
    }

    boolean isEmpty() {
      return count == 0;
    }

    void add(long hash, long sentAtMs) {
      if (2 * count == slots.length) {
        long[] grown = new long[slots.length * 2];
        for (int i = 0; i < count; i++) {
          int from = (head + 2 * i) % slots.length;
          grown[2 * i] = slots[from];
          grown[2 * i + 1] = slots[from + 1];
        }
        slots = grown;
        head = 0;
      }
      int at = (head + 2 * count) % slots.length;
      slots[at] = hash;
      slots[at + 1] = sentAtMs;
      count++;
    }

    long pollHash() {
      long hash = slots[head];
      head = (head + 2) % slots.length;
      count--;
      return hash;
    }

    void dropOlderThan(long cutoffMs) {
      while (count > 0 && slots[head + 1] < cutoffMs) {
        pollHash();
      }
    }
  }

  /** Sends in arrival order, as parallel arrays. */
  private static final class SendLog {
    String[] topics = new String[1024];
    long[] timestamps = new long[1024];
    int[] keySizes = new int[1024];
    int[] valueSizes = new int[1024];
    long[] hashes = new long[1024];
    long[] sentAt = new long[1024];
    int size;

    void add(String topic, long ts, int keySize, int valueSize, long hash, long nowMs) {
      if (size == topics.length) {
        int n = size * 2;
        topics = Arrays.copyOf(topics, n);
        timestamps = Arrays.copyOf(timestamps, n);
        keySizes = Arrays.copyOf(keySizes, n);
        valueSizes = Arrays.copyOf(valueSizes, n);
        hashes = Arrays.copyOf(hashes, n);
        sentAt = Arrays.copyOf(sentAt, n);
      }
      topics[size] = topic;
      timestamps[size] = ts;
      keySizes[size] = keySize;
      valueSizes[size] = valueSize;
      hashes[size] = hash;
      sentAt[size] = nowMs;
      size++;
    }

    void clear() {
      Arrays.fill(topics, 0, size, null);
      size = 0;
    }
  }
}
