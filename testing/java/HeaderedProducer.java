import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Test helper, run as a single source file (`java -cp ... HeaderedProducer.java`): sends
 * {@code count} records to {@code topic} through a producer with the audit interceptor, each
 * with headers of its own, so a test can check that the interceptor leaves them as the
 * application set them. Record i: key "k(i % 3)", value "v(i % 10)" (30 distinct pairs), header
 * "trace" = "t(i)", and for even i a second header "tenant" = "a". No timestamps: the producer
 * gives them.
 *
 * <p>Arguments: bootstrap servers, topic, audit topic, count.
 */
public final class HeaderedProducer {
  public static void main(String[] args) {
    Properties props = new Properties();
    props.put("bootstrap.servers", args[0]);
    props.put("key.serializer", ByteArraySerializer.class.getName());
    props.put("value.serializer", ByteArraySerializer.class.getName());
    props.put("interceptor.classes", "dev.uatu.audit.report.AuditProducerInterceptor");
    props.put("uatu.audit.service", "headered");
    props.put("uatu.audit.cluster", "local");
    props.put("uatu.audit.topic", args[2]);
    int count = Integer.parseInt(args[3]);
    try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
      for (int i = 0; i < count; i++) {
        ProducerRecord<byte[], byte[]> record =
            new ProducerRecord<>(args[1], bytes("k" + (i % 3)), bytes("v" + (i % 10)));
        record.headers().add("trace", bytes("t" + i));
        if (i % 2 == 0) {
          record.headers().add("tenant", bytes("a"));
        }
        producer.send(record);
      }
      producer.flush();
    }
  }

  private static byte[] bytes(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
