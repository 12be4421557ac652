package dev.uatu.replication;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * The replication job's Kafka sink, called from Python ({@code jobs/replication/writer.py})
 * through py4j. It runs in the JVM so that the records never cross into Python workers: the
 * copy stays at the pace of Spark's Kafka source and the Kafka producer.
 *
 * <p>Why not Spark's own Kafka sink: in Spark 4.2 it cannot set the record timestamp
 * (SPARK-50160 is not in it), it reports no per-record ack, and a retried task re-sends what
 * the failed attempt already wrote. Each task here first reads the destination's tail, so task
 * retries, executor loss and driver restarts all leave exactly one copy.
 */
public final class ReplicationSink {
  private ReplicationSink() {}

  /**
   * Builds the sink's producer and consumer once, here on the driver: a client setting the
   * Java client refuses fails the job before any record moves, not in every task. In local
   * mode the clients are the ones the tasks then use.
   */
  public static void checkClients(CopyConfig config) {
    Clients.producer(config.producerConfig);
    Clients.giveBack(config.consumerConfig, Clients.borrowConsumer(config.consumerConfig));
  }

  /**
   * Copies {@code records} (one Spark partition per Kafka partition) and returns the summary
   * rows in {@code summarySchemaDdl}. Lazy like any Dataset: the copy happens when the result
   * is computed, once per computation.
   */
  public static Dataset<Row> copy(Dataset<Row> records, CopyConfig config, String summarySchemaDdl) {
    StructType schema = StructType.fromDDL(summarySchemaDdl);
    return records.mapPartitions(new PartitionCopier(config), Encoders.row(schema));
  }
}
