package dev.uatu.loadgen;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.Arrays;

/**
 * The sequence numbers seen of one generator, exactly: sorted, disjoint runs {@code [start,
 * end)}. A generator's records arrive nearly in order, so a run is usually just extended; each
 * gap costs one run (16 bytes) until it is filled.
 *
 * <p>Lost means: missing between the lowest and the highest number seen. A generator's first
 * number seen is its start, so records lost before it are not counted (a consumer that starts
 * at the latest offsets would otherwise count everything before it as lost).
 */
final class SeqRuns {
  /** {@link #add} outcome: the number was seen before. */
  static final int DUPLICATE = 0;
  /** {@link #add} outcome: a new number. */
  static final int NEW = 1;

  private long[] starts = new long[4];
  private long[] ends = new long[4];
  private int n;

  // Set by add(): the change in lost numbers, and the gap a NEW number opened ([from, until)).
  long lostDelta;
  long gapFrom;
  long gapUntil;

  int add(long seq) {
    lostDelta = 0;
    gapFrom = gapUntil = 0;
    if (n == 0) {
      insert(0, seq, seq + 1);
      return NEW;
    }
    long maxEnd = ends[n - 1];
    if (seq >= maxEnd) {
      if (seq == maxEnd) {
        ends[n - 1]++;
      } else {
        insert(n, seq, seq + 1);
        lostDelta = seq - maxEnd;
        gapFrom = maxEnd;
        gapUntil = seq;
      }
      return NEW;
    }
    if (seq < starts[0]) {
      lostDelta = starts[0] - seq - 1;
      gapFrom = seq + 1;
      gapUntil = starts[0];
      if (seq + 1 == starts[0]) {
        starts[0] = seq;
      } else {
        insert(0, seq, seq + 1);
      }
      return NEW;
    }
    int i = runAtOrBefore(seq);
    if (seq < ends[i]) {
      return DUPLICATE;
    }
    // In the gap between runs i and i + 1 (there is a next run: seq < maxEnd).
    lostDelta = -1;
    boolean joinsLeft = seq == ends[i];
    boolean joinsRight = seq + 1 == starts[i + 1];
    if (joinsLeft && joinsRight) {
      ends[i] = ends[i + 1];
      remove(i + 1);
    } else if (joinsLeft) {
      ends[i]++;
    } else if (joinsRight) {
      starts[i + 1]--;
    } else {
      insert(i + 1, seq, seq + 1);
    }
    return NEW;
  }

  long lost() {
    long seen = 0;
    for (int i = 0; i < n; i++) {
      seen += ends[i] - starts[i];
    }
    return n == 0 ? 0 : ends[n - 1] - starts[0] - seen;
  }

  int runs() {
    return n;
  }

  /** Index of the last run whose start is at or before {@code seq} (there is one). */
  private int runAtOrBefore(long seq) {
    int lo = 0;
    int hi = n - 1;
    while (lo < hi) {
      int mid = (lo + hi + 1) >>> 1;
      if (starts[mid] <= seq) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    return lo;
  }

  private void insert(int at, long start, long end) {
    if (n == starts.length) {
      starts = Arrays.copyOf(starts, n * 2);
      ends = Arrays.copyOf(ends, n * 2);
    }
    System.arraycopy(starts, at, starts, at + 1, n - at);
    System.arraycopy(ends, at, ends, at + 1, n - at);
    starts[at] = start;
    ends[at] = end;
    n++;
  }

  private void remove(int at) {
    System.arraycopy(starts, at + 1, starts, at, n - at - 1);
    System.arraycopy(ends, at + 1, ends, at, n - at - 1);
    n--;
  }

  void write(DataOutputStream out) throws IOException {
    out.writeInt(n);
    for (int i = 0; i < n; i++) {
      out.writeLong(starts[i]);
      out.writeLong(ends[i]);
    }
  }

  static SeqRuns read(DataInputStream in) throws IOException {
    SeqRuns runs = new SeqRuns();
    int count = in.readInt();
    for (int i = 0; i < count; i++) {
      runs.insert(i, in.readLong(), in.readLong());
    }
    return runs;
  }
}
