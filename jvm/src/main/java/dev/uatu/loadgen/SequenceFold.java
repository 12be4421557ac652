package dev.uatu.loadgen;

import dev.uatu.sketch.KllSketches;
import dev.uatu.fold.FoldException;
import dev.uatu.fold.RecordFold;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.datasketches.kll.KllDoublesSketch;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * LOAD_GEN_CONSUME's fold of one partition's offset range: per window of fetch time and
 * generator, records, key + value bytes, end-to-end latency (fetch time - the send time in the
 * {@link LoadGenHeader}) in a KLL sketch, and, exactly, the sequence numbers seen twice and the
 * ones missing. The sequence numbers seen so far ({@link SeqRuns}, one per generator) come in
 * from the previous batch's state and go out in a state row, so duplicates and gaps are exact
 * across micro-batches. Records without a valid header count under a null generator (records
 * and bytes only).
 */
final class SequenceFold implements RecordFold {
  /** At most this many gap ranges and duplicate numbers are listed per row (all are counted). */
  static final int LISTED = 100;

  static final String ROW_SCHEMA =
      "partition int, window_start_ms long, generator string, records long, bytes long, "
          + "first_seq long, last_seq long, duplicates long, lost long, missing array<long>, "
          + "duplicate_seqs array<long>, latency_ms_sketch binary, latency_ms_p50 double, "
          + "latency_ms_p95 double, latency_ms_p99 double, latency_ms_p999 double, "
          + "latency_ms_max double, first_fetch_us long, last_fetch_us long, state binary";

  private final int partition;
  private final long windowMs;
  private final Map<String, SeqRuns> seen;
  private final TreeMap<Long, Map<String, Piece>> windows = new TreeMap<>();

  // Consecutive records mostly share their generator and window.
  private byte[] lastHeader;
  private String lastGenerator;
  private SeqRuns lastRuns;
  private long lastWindow = Long.MIN_VALUE;
  private Map<String, Piece> lastPieces;
  private Piece lastPiece; // of lastWindow and lastGenerator; null when either changed

  SequenceFold(int partition, long windowMs, byte[] state) {
    this.partition = partition;
    this.windowMs = windowMs;
    this.seen = decode(state);
  }

  @Override
  public void add(ConsumerRecord<byte[], byte[]> record, long fetchMicros) {
    long fetchMs = fetchMicros / 1000;
    long window = fetchMs - Math.floorMod(fetchMs, windowMs);
    if (window != lastWindow) {
      lastPieces = windows.computeIfAbsent(window, w -> new LinkedHashMap<>());
      lastWindow = window;
      lastPiece = null;
    }
    long bytes =
        (record.key() == null ? 0 : record.key().length)
            + (record.value() == null ? 0 : record.value().length);
    Header header = record.headers().lastHeader(LoadGenHeader.NAME);
    byte[] value = header == null ? null : header.value();
    if (!LoadGenHeader.valid(value)) {
      lastPieces.computeIfAbsent(null, g -> new Piece()).foreign(bytes, fetchMicros);
      return;
    }
    if (!sameGenerator(value)) {
      lastGenerator = LoadGenHeader.generator(value);
      lastHeader = value;
      lastRuns = seen.computeIfAbsent(lastGenerator, g -> new SeqRuns());
      lastPiece = null;
    }
    Piece piece = lastPiece;
    if (piece == null) {
      piece = lastPieces.computeIfAbsent(lastGenerator, g -> new Piece());
      lastPiece = piece;
    }
    long seq = LoadGenHeader.seq(value);
    double latencyMs = (fetchMicros - LoadGenHeader.sendMicros(value)) / 1000.0;
    piece.add(seq, lastRuns.add(seq), lastRuns, bytes, latencyMs, fetchMicros);
  }

  private boolean sameGenerator(byte[] value) {
    byte[] last = lastHeader;
    return last != null
        && Arrays.equals(
            last, LoadGenHeader.FIXED_BYTES, last.length,
            value, LoadGenHeader.FIXED_BYTES, value.length);
  }

  @Override
  public List<Row> finish() {
    List<Row> rows = new ArrayList<>();
    for (Map.Entry<Long, Map<String, Piece>> w : windows.entrySet()) {
      for (Map.Entry<String, Piece> e : w.getValue().entrySet()) {
        rows.add(e.getValue().row(partition, w.getKey(), e.getKey()));
      }
    }
    rows.add(
        RowFactory.create(
            partition, null, null, 0L, 0L, null, null, 0L, 0L, null, null, null, null, null,
            null, null, null, null, null, encode(seen)));
    return rows;
  }

  static Map<String, SeqRuns> decode(byte[] state) {
    Map<String, SeqRuns> out = new HashMap<>();
    if (state == null) {
      return out;
    }
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(state))) {
      int generators = in.readInt();
      for (int i = 0; i < generators; i++) {
        String generator = in.readUTF();
        out.put(generator, SeqRuns.read(in));
      }
    } catch (IOException e) {
      throw new FoldException("unreadable sequence state", e);
    }
    return out;
  }

  static byte[] encode(Map<String, SeqRuns> seen) {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeInt(seen.size());
      for (Map.Entry<String, SeqRuns> e : new TreeMap<>(seen).entrySet()) {
        out.writeUTF(e.getKey());
        e.getValue().write(out);
      }
    } catch (IOException e) {
      throw new FoldException("could not encode sequence state", e);
    }
    return bytes.toByteArray();
  }

  /** One (window, generator) of the range. */
  private static final class Piece {
    long records;
    long bytes;
    long firstSeq = Long.MAX_VALUE;
    long lastSeq = Long.MIN_VALUE;
    long duplicates;
    long lost;
    final List<Long> missing = new ArrayList<>();
    final List<Long> duplicateSeqs = new ArrayList<>();
    KllDoublesSketch latency;
    double latencyMax = Double.NEGATIVE_INFINITY;
    long firstFetchUs = Long.MAX_VALUE;
    long lastFetchUs = Long.MIN_VALUE;

    void foreign(long recordBytes, long fetchUs) {
      records++;
      bytes += recordBytes;
      fetched(fetchUs);
    }

    void add(long seq, int outcome, SeqRuns runs, long recordBytes, double latencyMs, long fetchUs) {
      records++;
      bytes += recordBytes;
      fetched(fetchUs);
      firstSeq = Math.min(firstSeq, seq);
      lastSeq = Math.max(lastSeq, seq);
      if (outcome == SeqRuns.DUPLICATE) {
        duplicates++;
        if (duplicateSeqs.size() < LISTED) {
          duplicateSeqs.add(seq);
        }
      } else {
        lost += runs.lostDelta;
        if (runs.gapUntil > runs.gapFrom && missing.size() < 2 * LISTED) {
          missing.add(runs.gapFrom);
          missing.add(runs.gapUntil);
        }
      }
      if (latency == null) {
        latency = KllSketches.doubles();
      }
      latency.update(latencyMs);
      latencyMax = Math.max(latencyMax, latencyMs);
    }

    private void fetched(long fetchUs) {
      firstFetchUs = Math.min(firstFetchUs, fetchUs);
      lastFetchUs = Math.max(lastFetchUs, fetchUs);
    }

    Row row(int partition, long windowStartMs, String generator) {
      boolean timed = latency != null && !latency.isEmpty();
      return RowFactory.create(
          partition,
          windowStartMs,
          generator,
          records,
          bytes,
          generator == null ? null : firstSeq,
          generator == null ? null : lastSeq,
          duplicates,
          lost,
          generator == null ? null : missing.stream().mapToLong(Long::longValue).toArray(),
          generator == null ? null : duplicateSeqs.stream().mapToLong(Long::longValue).toArray(),
          timed ? latency.toByteArray() : null,
          timed ? latency.getQuantile(0.5) : null,
          timed ? latency.getQuantile(0.95) : null,
          timed ? latency.getQuantile(0.99) : null,
          timed ? latency.getQuantile(0.999) : null,
          timed ? latencyMax : null,
          firstFetchUs,
          lastFetchUs,
          null);
    }
  }
}
