package dev.uatu.fold;

import java.util.Iterator;
import java.util.List;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;

/**
 * The rows a job's own JVM tasks return (a fold's partials, a copy's or a dispatch's
 * summaries), brought to the driver by the tasks' one Spark job.
 *
 * <p>Why not {@code spark.createDataFrame(rdd, schema).collectAsList()}: a Dataset over an RDD
 * of rows has every task build the schema's row encoder (code generation per task, costlier
 * the less warm the JVM), and the driver plan, optimise and generate code for a scan that only
 * collects. The tasks' rows are few (a
 * handful per range), so they travel as they are, and a caller that needs a frame makes a
 * local one on the driver.
 */
public final class TaskRows {
  private TaskRows() {}

  /**
   * Runs {@code task} once per element of {@code inputs} (one Spark task each, in the calling
   * thread's scheduler pool) and returns every row the tasks gave, in task order. Runs now;
   * a failed task fails the call with Spark's exception.
   */
  public static <T> List<Row> collect(
      SparkSession spark, List<T> inputs, FlatMapFunction<Iterator<T>, Row> task) {
    return JavaSparkContext.fromSparkContext(spark.sparkContext())
        .parallelize(inputs, Math.max(1, inputs.size()))
        .mapPartitions(task)
        .collect();
  }
}
