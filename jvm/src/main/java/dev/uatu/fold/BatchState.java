package dev.uatu.fold;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.SparkSession;

/**
 * A job's own state next to Spark's checkpoint, versioned by micro-batch like Spark's state
 * store: {@code <dir>/<batchId>} holds the state after batch {@code batchId}. A batch reads
 * the newest state of an earlier batch and writes its own before its output is committed, so
 * a batch replayed after a crash starts from the same state and computes the same result
 * (and overwrites its own file). Works on any Hadoop file system the checkpoint can live on.
 */
public final class BatchState {
  private BatchState() {}

  /** Writes the state after {@code batchId} (atomically: a temporary file, then a rename). */
  public static void write(SparkSession spark, String dir, long batchId, byte[] state, int keep)
      throws IOException {
    Path root = new Path(dir);
    FileSystem fs = root.getFileSystem(spark.sparkContext().hadoopConfiguration());
    fs.mkdirs(root);
    Path tmp = new Path(root, "." + batchId + ".tmp");
    try (FSDataOutputStream out = fs.create(tmp, true)) {
      ((OutputStream) out).write(state);
    }
    Path target = new Path(root, Long.toString(batchId));
    fs.delete(target, false);
    if (!fs.rename(tmp, target)) {
      throw new IOException("could not rename " + tmp + " to " + target);
    }
    List<Long> batches = batches(fs, root);
    for (int i = 0; i < batches.size() - Math.max(1, keep); i++) {
      fs.delete(new Path(root, Long.toString(batches.get(i))), false);
    }
  }

  /** The state of the newest batch before {@code batchId}, or null when there is none. */
  public static byte[] latestBefore(SparkSession spark, String dir, long batchId)
      throws IOException {
    Path root = new Path(dir);
    FileSystem fs = root.getFileSystem(spark.sparkContext().hadoopConfiguration());
    if (!fs.exists(root)) {
      return null;
    }
    long newest = -1;
    for (long batch : batches(fs, root)) {
      if (batch < batchId) {
        newest = batch;
      }
    }
    if (newest < 0) {
      return null;
    }
    try (InputStream in = fs.open(new Path(root, Long.toString(newest)))) {
      return in.readAllBytes();
    }
  }

  /** The state written after exactly {@code batchId}, or null when there is none. */
  public static byte[] read(SparkSession spark, String dir, long batchId) throws IOException {
    Path file = new Path(new Path(dir), Long.toString(batchId));
    FileSystem fs = file.getFileSystem(spark.sparkContext().hadoopConfiguration());
    if (!fs.exists(file)) {
      return null;
    }
    try (InputStream in = fs.open(file)) {
      return in.readAllBytes();
    }
  }

  private static List<Long> batches(FileSystem fs, Path root) throws IOException {
    List<Long> batches = new ArrayList<>();
    for (FileStatus status : fs.listStatus(root)) {
      String name = status.getPath().getName();
      if (!name.isEmpty() && name.chars().allMatch(Character::isDigit)) {
        batches.add(Long.parseLong(name));
      }
    }
    Collections.sort(batches);
    return batches;
  }
}
