package dev.uatu.audit.report;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.config.ConfigException;

/**
 * The {@code uatu.audit.*} settings of an audit interceptor, read from the Kafka client's own
 * configuration (what {@code interceptor.classes} interceptors receive in {@code configure}).
 *
 * <pre>
 *   uatu.audit.service          required: the reporting service's name
 *   uatu.audit.cluster          required: the audited cluster's name in conf/clusters.yaml
 *   uatu.audit.topic            required: the audit topic the reports go to
 *   uatu.audit.window.seconds   report window length (default 60)
 *   uatu.audit.report.interval.ms  how often reports are sent (default 10000)
 *   uatu.audit.lg.k             HLL precision (default 12, the audit job's)
 *   uatu.audit.tier             SERVICE (default) or KRP; consumers always report CONSUMER
 *   uatu.audit.producer.*       settings of the reports' producer; default: the client's
 *                               bootstrap.servers, client.dns.lookup, security.*, ssl.*, sasl.*
 * </pre>
 *
 * A missing or bad setting is a {@link ConfigException} naming it: the client does not start.
 */
public record AuditSettings(
    String service,
    String cluster,
    String topic,
    int windowSeconds,
    long reportIntervalMs,
    int lgK,
    int tier,
    Map<String, Object> reporterConfig) {

  public static final String PREFIX = "uatu.audit.";
  private static final List<String> CONNECTION_PREFIXES =
      List.of("security.", "ssl.", "sasl.");

  /** The settings in {@code configs}; {@code defaultTier} when uatu.audit.tier is absent. */
  public static AuditSettings from(Map<String, ?> configs, int defaultTier) {
    String service = required(configs, "service");
    String cluster = required(configs, "cluster");
    String topic = required(configs, "topic");
    int window = (int) number(configs, "window.seconds", 60, 1, 86_400);
    long interval = number(configs, "report.interval.ms", 10_000, 1, Long.MAX_VALUE);
    int lgK = (int) number(configs, "lg.k", 12, 4, 21);
    int tier = defaultTier;
    Object tierName = configs.get(PREFIX + "tier");
    if (tierName != null && defaultTier != AuditReports.TIER_CONSUMER) {
      tier =
          switch (tierName.toString()) {
            case "SERVICE" -> AuditReports.TIER_SERVICE;
            case "KRP" -> AuditReports.TIER_KRP;
            default ->
                throw new ConfigException(PREFIX + "tier", tierName, "must be SERVICE or KRP");
          };
    }
    Map<String, Object> reporter = new HashMap<>();
    for (Map.Entry<String, ?> e : configs.entrySet()) {
      String k = e.getKey();
      if (k.equals("bootstrap.servers")
          || k.equals("client.dns.lookup")
          || CONNECTION_PREFIXES.stream().anyMatch(k::startsWith)) {
        reporter.put(k, e.getValue());
      }
    }
    String producerPrefix = PREFIX + "producer.";
    for (Map.Entry<String, ?> e : configs.entrySet()) {
      if (e.getKey().startsWith(producerPrefix)) {
        reporter.put(e.getKey().substring(producerPrefix.length()), e.getValue());
      }
    }
    if (!reporter.containsKey("bootstrap.servers")) {
      throw new ConfigException(producerPrefix + "bootstrap.servers", null, "required");
    }
    return new AuditSettings(service, cluster, topic, window, interval, lgK, tier, reporter);
  }

  private static String required(Map<String, ?> configs, String name) {
    Object v = configs.get(PREFIX + name);
    if (v == null || v.toString().isBlank()) {
      throw new ConfigException(PREFIX + name, v, "required by the uatu audit interceptor");
    }
    return v.toString();
  }

  private static long number(Map<String, ?> configs, String name, long dflt, long min, long max) {
    Object v = configs.get(PREFIX + name);
    if (v == null) {
      return dflt;
    }
    long n;
    try {
      n = Long.parseLong(v.toString().trim());
    } catch (NumberFormatException e) {
      throw new ConfigException(PREFIX + name, v, "must be an integer");
    }
    if (n < min || n > max) {
      throw new ConfigException(PREFIX + name, v, "must be in " + min + ".." + max);
    }
    return n;
  }
}
