package dev.uatu.dispatch;

import java.io.Serializable;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.connector.catalog.CatalogV2Util;
import org.apache.spark.sql.connector.catalog.Column;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A Spark streaming source that plans Kafka offset ranges whose records are <em>due</em>:
 * {@code spark.readStream.format("dev.uatu.dispatch.DueRangeSource")}. Each micro-batch is one
 * row per partition, {@code (topic, partition, from_offset, until_offset)}; the dispatcher
 * reads the records itself ({@link RangeDispatcher}), so the rows are all Spark moves.
 *
 * <p>A record is due once its timestamp plus the topic's processing delay has passed. The end
 * of each partition's next range is the first offset whose timestamp is not yet due
 * (the offset for the time {@code now - delay}), so every record before it is due, and a batch
 * never holds a record that must wait: waiting for a retry tier's delay costs no task slot and
 * blocks no other partition, tier or query; the query simply plans nothing more until the next
 * trigger. (A record with an older timestamp behind a newer one waits for it: it is dispatched
 * late, never early.) Offsets live in the query's checkpoint like Spark's Kafka source's, in the
 * same JSON shape ({@link TopicOffsets}).
 *
 * <p>Options: {@code topic}; {@code delayMs} (default 0); {@code startingOffsets} (earliest,
 * latest, or offsets JSON with -2 = earliest, -1 = latest; for a new checkpoint only);
 * {@code endingOffsets} (offsets JSON: a bounded run, only those partitions, up to those
 * offsets); {@code maxRecordsPerBatch}; and the Kafka consumer's settings with a
 * {@code kafka.} prefix.
 */
public final class DueRangeSource implements TableProvider {
  static final StructType SCHEMA =
      StructType.fromDDL("topic string, partition int, from_offset long, until_offset long");

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(
      StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new DueTable();
  }

  private static final class DueTable implements Table, SupportsRead {
    @Override
    public String name() {
      return "uatu-due-kafka-ranges";
    }

    @Override
    public Column[] columns() {
      return CatalogV2Util.structTypeToV2Columns(SCHEMA, false);
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return () -> new DueScan(options);
    }
  }

  private static final class DueScan implements Scan {
    private final CaseInsensitiveStringMap options;

    DueScan(CaseInsensitiveStringMap options) {
      this.options = options;
    }

    @Override
    public StructType readSchema() {
      return SCHEMA;
    }

    @Override
    public String description() {
      return "due Kafka ranges of " + options.get("topic");
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new DueRangeStream(options.asCaseSensitiveMap());
    }
  }

  /** One partition's range: the only row its reader yields. */
  static final class RangePartition implements InputPartition, Serializable {
    private static final long serialVersionUID = 1L;
    final String topic;
    final int partition;
    final long fromOffset;
    final long untilOffset;

    RangePartition(String topic, int partition, long fromOffset, long untilOffset) {
      this.topic = topic;
      this.partition = partition;
      this.fromOffset = fromOffset;
      this.untilOffset = untilOffset;
    }
  }

  static final class RangeReaderFactory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition input) {
      RangePartition p = (RangePartition) input;
      return new PartitionReader<>() {
        private boolean consumed;

        @Override
        public boolean next() {
          if (consumed) {
            return false;
          }
          consumed = true;
          return true;
        }

        @Override
        public InternalRow get() {
          return new GenericInternalRow(
              new Object[] {
                UTF8String.fromString(p.topic), p.partition, p.fromOffset, p.untilOffset
              });
        }

        @Override
        public void close() {}
      };
    }
  }
}
