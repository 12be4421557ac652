package dev.uatu.audit;

import dev.uatu.fold.FoldException;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * The distinct dedupe keys of one partition's exact audits, one set per (interval, window): what
 * makes {@code unique_count} exact across micro-batches. O(1) per key: a record's key is looked
 * up in, and added to, its window's in-memory hash set.
 *
 * <p>Durable in {@link KeyFiles} under the checkpoint: each batch appends, per window it
 * touched, the keys that were new to it, and folds a window's files into one {@code .all} file
 * every {@link #COMPACT_AFTER} batches. A batch reads only earlier batches' files, so a replay
 * after a crash finds the same keys new and gives the same counts (exactly once, with the
 * counts MERGE's idempotent commit).
 *
 * <p>In memory, between batches, the executor keeps the sets of the windows the partition's
 * watermark has not passed (checked in after a batch, checked out by the next one, as Spark's
 * state store providers stay loaded in their executor). The watermark is the newest placement
 * time the partition has seen, capped at the audit time (an event time from the future cannot
 * push it ahead): a window whose end plus allowed lateness is behind it leaves memory. Its keys
 * stay on disk, so a late record still finds them (read back once for its batch): late data is
 * updated exactly, never dropped. Memory therefore holds the open windows only; disk holds 8
 * bytes per distinct key and window (plus one file per batch that touched the window, until the
 * next compaction).
 *
 * <p>Retention: once a window's end is its interval's retention behind the watermark the
 * partition had before the batch (the newest log entry of an earlier batch), the window's keys
 * are gone for the batch: {@link #window} returns null (the fold then estimates the uniqueness
 * of the window's records from its sketch) and {@link #checkIn} deletes its directory. The
 * decision depends on earlier batches only, so a replayed batch drops and sees the same
 * windows; a window dropped once stays dropped (the watermark never goes back), so the batches
 * after it never need its files.
 */
final class PartitionKeys {
  /** A window's files are compacted into one once it has this many. */
  static final int COMPACT_AFTER = 8;
  /** Log entries kept per partition (the newest is what a batch needs). */
  static final int KEEP_LOGS = 5;

  // The executor's loaded partitions, by their directory, between two batches.
  private static final Map<String, PartitionKeys> LOADED = new ConcurrentHashMap<>();

  private final FileSystem fs;
  private final Path dir;
  private final int partition;
  private long version; // the batch whose state this is (-1: none)
  private long watermarkMs;
  private final Map<WindowId, WindowKeys> windows = new HashMap<>();
  // Per interval seconds, the oldest window start on disk (Long.MAX_VALUE: none); absent until
  // the interval's directory was listed. Lets checkIn skip listing when nothing can expire.
  private final Map<Integer, Long> oldestOnDisk = new HashMap<>();

  // Per batch, reset by checkout.
  private long batch;
  private long watermarkBeforeMs; // the watermark of the batches before this one
  private long windowsRead;
  private long bytesWritten;
  private long windowsDropped;

  record WindowId(int intervalSeconds, long startMs) {}

  /** One window's keys in memory and the keys the running batch added to it. */
  static final class WindowKeys {
    final LongHashSet keys;
    int filesSinceAll;
    long[] added = new long[16];
    int addedCount;

    WindowKeys(LongHashSet keys, int filesSinceAll) {
      this.keys = keys;
      this.filesSinceAll = filesSinceAll;
    }

    /** True when {@code key} is new to the window. */
    boolean add(long key) {
      if (!keys.add(key)) {
        return false;
      }
      if (addedCount == added.length) {
        added = Arrays.copyOf(added, addedCount * 2);
      }
      added[addedCount++] = key;
      return true;
    }
  }

  private PartitionKeys(FileSystem fs, Path dir, int partition) {
    this.fs = fs;
    this.dir = dir;
    this.partition = partition;
  }

  /**
   * The state of {@code partition} as of the batches before {@code batch}: the executor's loaded
   * copy if it is that state, else a fresh one whose windows are read from disk as they are
   * touched. The caller owns it until {@link #checkIn}; a task that fails never checks it in,
   * so no half-updated state is ever reused.
   */
  static PartitionKeys checkOut(String keysDir, Configuration conf, int partition, long batch) {
    Path dir = new Path(keysDir, "p" + partition);
    try {
      FileSystem fs = KeyFiles.fileSystem(dir, conf);
      long newest = KeyFiles.newestLog(fs, new Path(dir, "log"), batch);
      PartitionKeys loaded = LOADED.remove(dir.toString());
      PartitionKeys state;
      if (loaded != null && loaded.version == newest) {
        state = loaded;
      } else {
        state = new PartitionKeys(fs, dir, partition);
        state.version = newest;
        state.watermarkMs =
            newest < 0
                ? Long.MIN_VALUE
                : KeyFiles.readLog(fs, new Path(new Path(dir, "log"), Long.toString(newest)));
      }
      state.batch = batch;
      state.watermarkBeforeMs = state.watermarkMs;
      state.windowsRead = 0;
      state.bytesWritten = 0;
      state.windowsDropped = 0;
      return state;
    } catch (IOException e) {
      throw new FoldException("cannot read the exact audit keys in " + dir, e);
    }
  }

  /** Forget every loaded partition under {@code keysDir} (the job ends). */
  static void release(String keysDir) {
    String prefix = new Path(keysDir).toString() + "/";
    LOADED.keySet().removeIf(k -> k.startsWith(prefix));
  }

  /**
   * The window's keys, read from disk (files of earlier batches) if not in memory; null when
   * the window's end is {@code retentionMs} behind the watermark before this batch (its keys
   * are dropped).
   */
  WindowKeys window(int intervalSeconds, long startMs, long retentionMs) {
    WindowId id = new WindowId(intervalSeconds, startMs);
    if (expired(id, retentionMs)) {
      return null;
    }
    WindowKeys window = windows.get(id);
    if (window != null) {
      return window;
    }
    Path windowDir = windowDir(id);
    try {
      List<KeyFiles.Version> needed = KeyFiles.needed(KeyFiles.versions(fs, windowDir, batch));
      LongHashSet keys = new LongHashSet();
      for (KeyFiles.Version v : needed) {
        KeyFiles.readInto(fs, v.path(), keys);
      }
      if (!needed.isEmpty()) {
        windowsRead++;
      }
      window = new WindowKeys(keys, needed.size());
    } catch (IOException e) {
      throw new FoldException("cannot read the exact audit keys in " + windowDir, e);
    }
    windows.put(id, window);
    return window;
  }

  /**
   * Writes the batch's new keys and the partition's watermark, lets windows the watermark has
   * passed leave memory, and keeps the rest for the next batch.
   *
   * @param newestPlacedMs the newest placement time of the batch's records in this partition
   * @param auditMs the batch's audit time
   * @param latenessMs a window's allowed lateness, by interval seconds
   * @param retentionMs how long a window's keys are kept, by interval seconds (exact ones)
   */
  void checkIn(
      long newestPlacedMs,
      long auditMs,
      Map<Integer, Long> latenessMs,
      Map<Integer, Long> retentionMs) {
    try {
      for (Map.Entry<WindowId, WindowKeys> e : windows.entrySet()) {
        WindowKeys w = e.getValue();
        if (w.addedCount > 0) {
          persist(e.getKey(), w);
        }
      }
      for (Map.Entry<Integer, Long> e : retentionMs.entrySet()) {
        sweep(e.getKey(), e.getValue());
      }
      watermarkMs = Math.max(watermarkMs, Math.min(newestPlacedMs, auditMs));
      Path logDir = new Path(dir, "log");
      KeyFiles.writeLog(fs, new Path(logDir, Long.toString(batch)), watermarkMs);
      bytesWritten += 12;
      List<Long> logs = KeyFiles.logBatches(fs, logDir);
      for (int i = 0; i < logs.size() - KEEP_LOGS; i++) {
        if (logs.get(i) < batch) {
          fs.delete(new Path(logDir, Long.toString(logs.get(i))), false);
        }
      }
    } catch (IOException e) {
      throw new FoldException("cannot write the exact audit keys in " + dir, e);
    }
    Iterator<Map.Entry<WindowId, WindowKeys>> it = windows.entrySet().iterator();
    while (it.hasNext()) {
      Map.Entry<WindowId, WindowKeys> e = it.next();
      WindowId id = e.getKey();
      long end = id.startMs() + id.intervalSeconds() * 1000L;
      long lateness = latenessMs.getOrDefault(id.intervalSeconds(), id.intervalSeconds() * 1000L);
      if (end + lateness < watermarkMs
          || expired(id, retentionMs.getOrDefault(id.intervalSeconds(), Long.MAX_VALUE))) {
        it.remove();
      }
    }
    version = batch;
    LOADED.put(dir.toString(), this);
  }

  /** Whether the window's keys are past {@code retentionMs}, as of the batches before this one. */
  private boolean expired(WindowId id, long retentionMs) {
    long end = id.startMs() + id.intervalSeconds() * 1000L;
    return watermarkBeforeMs != Long.MIN_VALUE
        && retentionMs != Long.MAX_VALUE
        && end + retentionMs < watermarkBeforeMs;
  }

  /**
   * Deletes the directories of the interval's windows past {@code retentionMs}: the windows
   * {@link #window} already refused this batch. Lists the interval's directory only when its
   * oldest window on disk may have expired (or is not known yet).
   */
  private void sweep(int intervalSeconds, long retentionMs) throws IOException {
    Long oldest = oldestOnDisk.get(intervalSeconds);
    if (oldest != null
        && (oldest == Long.MAX_VALUE
            || !expired(new WindowId(intervalSeconds, oldest), retentionMs))) {
      return;
    }
    long kept = Long.MAX_VALUE;
    FileStatus[] statuses;
    try {
      statuses = fs.listStatus(new Path(dir, "i" + intervalSeconds));
    } catch (FileNotFoundException e) {
      statuses = new FileStatus[0];
    }
    for (FileStatus status : statuses) {
      String name = status.getPath().getName();
      if (!name.startsWith("w") || !name.substring(1).matches("-?\\d+")) {
        continue;
      }
      long start = Long.parseLong(name.substring(1));
      if (expired(new WindowId(intervalSeconds, start), retentionMs)) {
        fs.delete(status.getPath(), true);
        windowsDropped++;
      } else {
        kept = Math.min(kept, start);
      }
    }
    oldestOnDisk.put(intervalSeconds, kept);
  }

  private void persist(WindowId id, WindowKeys w) throws IOException {
    Path windowDir = windowDir(id);
    KeyFiles.mkdirs(fs, windowDir);
    oldestOnDisk.computeIfPresent(id.intervalSeconds(), (k, v) -> Math.min(v, id.startMs()));
    boolean compact = w.filesSinceAll + 1 >= COMPACT_AFTER;
    // A replay decides as the first run did; the other kind of file cannot be there, unless
    // written by a different build of the job: remove it so a reader never sees both.
    fs.delete(new Path(windowDir, batch + (compact ? KeyFiles.KEYS : KeyFiles.ALL)), false);
    if (compact) {
      // Earlier files stay until a later batch's compaction: a replay of this batch reads them.
      List<KeyFiles.Version> before = KeyFiles.versions(fs, windowDir, batch);
      long[] all = w.keys.toArray();
      KeyFiles.write(fs, new Path(windowDir, batch + KeyFiles.ALL), all, all.length);
      bytesWritten += 12 + 8L * all.length;
      long previousAll = -1;
      for (KeyFiles.Version v : before) {
        if (v.all()) {
          previousAll = v.batch();
        }
      }
      // Files older than the previous .all (an earlier, committed batch) are read by nobody.
      for (KeyFiles.Version v : before) {
        if (v.batch() < previousAll) {
          fs.delete(v.path(), false);
        }
      }
      w.filesSinceAll = 1;
    } else {
      KeyFiles.write(fs, new Path(windowDir, batch + KeyFiles.KEYS), w.added, w.addedCount);
      bytesWritten += 12 + 8L * w.addedCount;
      w.filesSinceAll++;
    }
    w.added = new long[16];
    w.addedCount = 0;
  }

  private Path windowDir(WindowId id) {
    return new Path(new Path(dir, "i" + id.intervalSeconds()), "w" + id.startMs());
  }

  int partition() {
    return partition;
  }

  long watermarkMs() {
    return watermarkMs;
  }

  /** Windows in memory. */
  long windowsInMemory() {
    return windows.size();
  }

  /** Keys in memory, over every window. */
  long keysInMemory() {
    long n = 0;
    for (WindowKeys w : windows.values()) {
      n += w.keys.size();
    }
    return n;
  }

  /** Bytes of the in-memory sets. */
  long memoryBytes() {
    long n = 0;
    for (WindowKeys w : windows.values()) {
      n += w.keys.memoryBytes();
    }
    return n;
  }

  /** Windows this batch read back from disk. */
  long windowsRead() {
    return windowsRead;
  }

  /** Bytes this batch wrote. */
  long bytesWritten() {
    return bytesWritten;
  }

  /** Windows whose keys this batch deleted from disk (past their retention). */
  long windowsDropped() {
    return windowsDropped;
  }

  /** The start of the oldest window with keys on disk after the batch, or null (none). */
  Long oldestWindowMs() {
    long oldest = Long.MAX_VALUE;
    for (long start : oldestOnDisk.values()) {
      oldest = Math.min(oldest, start);
    }
    return oldest == Long.MAX_VALUE ? null : oldest;
  }

  /** The windows in memory and their keys, oldest first: "i{interval s}/w{start ms}=keys ...". */
  String windowKeys() {
    StringBuilder out = new StringBuilder();
    windows.entrySet().stream()
        .sorted(
            (a, b) ->
                a.getKey().startMs() != b.getKey().startMs()
                    ? Long.compare(a.getKey().startMs(), b.getKey().startMs())
                    : Integer.compare(a.getKey().intervalSeconds(), b.getKey().intervalSeconds()))
        .forEach(
            e ->
                out.append(out.length() == 0 ? "" : " ")
                    .append("i").append(e.getKey().intervalSeconds())
                    .append("/w").append(e.getKey().startMs())
                    .append('=').append(e.getValue().keys.size()));
    return out.toString();
  }

  /** For a test: the windows in memory, as (interval seconds, start ms). */
  List<long[]> windowIds() {
    List<long[]> out = new ArrayList<>();
    for (WindowId id : windows.keySet()) {
      out.add(new long[] {id.intervalSeconds(), id.startMs()});
    }
    return out;
  }
}
