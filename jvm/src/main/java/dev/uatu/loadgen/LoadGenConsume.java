package dev.uatu.loadgen;

import dev.uatu.fold.BatchState;
import dev.uatu.fold.FoldFactory;
import dev.uatu.fold.FoldRange;
import dev.uatu.fold.RangeFolds;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.StructType;

/**
 * LOAD_GEN_CONSUME's data path, called from Python ({@code jobs/loadgen/measure.py}) once per
 * micro-batch: folds the batch's Spark-planned offset ranges with {@link SequenceFold}, one fold
 * per partition ({@link RangeFolds} packs them into tasks), and keeps the sequence numbers
 * seen in {@link BatchState} under the
 * checkpoint, written before the batch's rows are: a replayed batch starts from the same state
 * and finds the same duplicates and gaps.
 */
public final class LoadGenConsume {
  private static final int KEEP_STATES = 5;

  private LoadGenConsume() {}

  /** The fold rows' schema (the last column, {@code state}, is null in returned rows). */
  public static String rowSchema() {
    return SequenceFold.ROW_SCHEMA;
  }

  /**
   * Folds {@code ranges} now (once) and returns the per (partition, window, generator) rows as
   * a local Dataset, after writing the state after {@code batchId} to {@code stateDir}.
   */
  public static Dataset<Row> foldBatch(
      SparkSession spark,
      List<FoldRange> ranges,
      Map<String, String> consumerConfig,
      long windowMs,
      String stateDir,
      long batchId,
      long timeoutMs)
      throws IOException {
    Map<Integer, byte[]> states = decode(BatchState.latestBefore(spark, stateDir, batchId));
    HashMap<Integer, byte[]> prior = new HashMap<>(states);
    FoldFactory factory =
        range -> new SequenceFold(range.partition(), windowMs, prior.get(range.partition()));
    StructType schema = StructType.fromDDL(SequenceFold.ROW_SCHEMA);
    List<Row> rows = RangeFolds.fold(spark, ranges, consumerConfig, factory, timeoutMs);
    List<Row> stats = new ArrayList<>();
    int stateColumn = schema.fieldIndex("state");
    for (Row row : rows) {
      if (row.isNullAt(stateColumn)) {
        stats.add(row);
      } else {
        states.put(row.getInt(0), (byte[]) row.get(stateColumn));
      }
    }
    BatchState.write(spark, stateDir, batchId, encode(states), KEEP_STATES);
    return spark.createDataFrame(stats, schema);
  }

  static Map<Integer, byte[]> decode(byte[] blob) throws IOException {
    Map<Integer, byte[]> out = new TreeMap<>();
    if (blob == null) {
      return out;
    }
    try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(blob))) {
      int partitions = in.readInt();
      for (int i = 0; i < partitions; i++) {
        int partition = in.readInt();
        byte[] state = new byte[in.readInt()];
        in.readFully(state);
        out.put(partition, state);
      }
    }
    return out;
  }

  static byte[] encode(Map<Integer, byte[]> states) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (DataOutputStream out = new DataOutputStream(bytes)) {
      out.writeInt(states.size());
      for (Map.Entry<Integer, byte[]> e : new TreeMap<>(states).entrySet()) {
        out.writeInt(e.getKey());
        out.writeInt(e.getValue().length);
        out.write(e.getValue());
      }
    }
    return bytes.toByteArray();
  }
}
