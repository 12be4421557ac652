import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Test helper, run as a single source file (`java -cp ... AuditedConsumer.java`): consumers
 * with the audit consumer interceptor (tier CONSUMER), one after the other, each in its own
 * group, reading {@code topic} from the beginning until it has consumed at least its limit of
 * records, then closing (which sends its last reports). Every record a poll returned is
 * printed as "group partition offset", so a test knows exactly what each consumer consumed.
 *
 * <p>Arguments: bootstrap servers, topic, audit topic, then one or more "group:limit:max
 * poll records". Exit status 1 when a consumer has not reached its limit within 60 s.
 */
public final class AuditedConsumer {
  public static void main(String[] args) {
    for (String consumer : List.of(args).subList(3, args.length)) {
      String[] spec = consumer.split(":");
      if (!consume(args[0], args[1], args[2], spec[0], Long.parseLong(spec[1]), spec[2])) {
        System.err.println("group " + spec[0] + " consumed fewer than " + spec[1] + " records");
        System.exit(1);
      }
    }
  }

  private static boolean consume(
      String bootstrap, String topic, String auditTopic, String group, long limit, String max) {
    Properties props = new Properties();
    props.put("bootstrap.servers", bootstrap);
    props.put("group.id", group);
    props.put("auto.offset.reset", "earliest");
    props.put("enable.auto.commit", "false");
    props.put("max.poll.records", max);
    props.put("key.deserializer", ByteArrayDeserializer.class.getName());
    props.put("value.deserializer", ByteArrayDeserializer.class.getName());
    props.put("interceptor.classes", "dev.uatu.audit.report.AuditConsumerInterceptor");
    props.put("uatu.audit.service", "java-consumer");
    props.put("uatu.audit.cluster", "local");
    props.put("uatu.audit.topic", auditTopic);
    long consumed = 0;
    long deadline = System.currentTimeMillis() + 60_000;
    try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
      consumer.subscribe(List.of(topic));
      while (consumed < limit && System.currentTimeMillis() < deadline) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(500));
        for (ConsumerRecord<byte[], byte[]> r : records) {
          System.out.println(group + " " + r.partition() + " " + r.offset());
          consumed++;
        }
      }
    }
    return consumed >= limit;
  }
}
