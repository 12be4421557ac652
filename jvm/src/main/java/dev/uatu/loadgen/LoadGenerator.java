package dev.uatu.loadgen;

import dev.uatu.fold.TaskRows;
import java.util.List;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.types.StructType;

/**
 * LOAD_GEN_PRODUCE's data path, called from Python ({@code jobs/loadgen/generator.py}) through
 * py4j once per micro-batch: one Spark task per {@link TaskPlan}, each collecting the batch's
 * share of what its partition group's {@link Runner} sent with the executor's Java producer
 * ({@link ProduceTask}). Records are made in the JVM, never as Spark rows or in Python; the
 * tasks return one summary row per partition.
 */
public final class LoadGenerator {
  private LoadGenerator() {}

  /**
   * Runs the batch's producer tasks now (once) and returns their rows ({@link #rowSchema}) as
   * a local Dataset.
   */
  public static Dataset<Row> produce(
      SparkSession spark, List<TaskPlan> plans, ProduceConfig config) {
    StructType schema = StructType.fromDDL(ProduceTask.ROW_SCHEMA);
    return spark.createDataFrame(TaskRows.collect(spark, plans, new ProduceTask(config)), schema);
  }

  public static String rowSchema() {
    return ProduceTask.ROW_SCHEMA;
  }

  /**
   * Stops this JVM's generator threads of {@code generatorPrefix} (in local mode, all of them)
   * and returns the rows ({@link #rowSchema}) of what they sent after their last cut, so the
   * driver can save where they stopped. Runners on other executors end by themselves once no
   * batch renews them.
   */
  public static Dataset<Row> stop(SparkSession spark, String generatorPrefix)
      throws InterruptedException {
    return spark.createDataFrame(
        Runners.stop(generatorPrefix), StructType.fromDDL(ProduceTask.ROW_SCHEMA));
  }

  /** Builds the producer once on the driver: a setting the Java client refuses fails here. */
  public static void checkProducer(ProduceConfig config) {
    Producers.get(config.producerConfig);
  }
}
