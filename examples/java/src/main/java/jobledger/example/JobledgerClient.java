package jobledger.example;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyFactory;
import java.security.KeyPairGenerator;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.Signature;
import java.security.spec.NamedParameterSpec;
import java.security.spec.PKCS8EncodedKeySpec;
import java.time.Duration;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.UUID;

import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.avro.message.SchemaStore;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A jobledger client that knows only Kafka, Avro and the published {@code .avsc} files.
 *
 * <p>It plays a TaskExecutor with its own task runner and a client submitting a job: it registers
 * the TaskExecutor at the ResourceManager, submits a JobGraph of one no-op vertex, and prints the
 * decisions the services take (registration, slot offers, deployments, job status). Each task
 * deployed into its slots is reported INITIALIZING, RUNNING and FINISHED, as a task runner would;
 * it exits 0 when the job is FINISHED and 1 when it ends otherwise or not within the time limit.
 *
 * <p>On a secured cluster ({@code jobledger broker --secure}) it connects with a principal's
 * property file ({@code --properties}, librdkafka's keys, as {@code jobledger broker --secure}
 * writes them) and signs every record with an Ed25519 key ({@code --signing-key}, the PKCS#8 PEM
 * file {@code jobledger keys new} writes), as docs/reference/signing.md lays out.
 *
 * <p>Usage: {@code JobledgerClient --bootstrap HOST:PORT --schemas DIR [--prefix P]
 * [--parallelism N] [--timeout-s S] [--properties FILE] [--signing-key FILE]}
 */
public final class JobledgerClient {
  private static final String PRODUCER = "java-client";
  private static final String TYPE_HEADER = "jobledger.type";
  private static final Set<String> TERMINAL = Set.of("FINISHED", "FAILED", "CANCELED");

  private final Map<String, Schema> schemas = new HashMap<>();
  private final SchemaStore.Cache store = new SchemaStore.Cache();
  private final Map<Schema, BinaryMessageDecoder<GenericRecord>> decoders = new HashMap<>();
  private final String prefix;
  private final KafkaProducer<String, byte[]> producer;
  private final KafkaConsumer<String, byte[]> consumer;
  private final String resourceId = "java-tm-" + UUID.randomUUID().toString().substring(0, 8);
  /** This run of the TaskExecutor: its beats count only while it is the registered one. */
  private final String instanceId = UUID.randomUUID().toString();
  private final String jobId = "java-job-" + UUID.randomUUID().toString().substring(0, 8);
  private final Map<String, GenericRecord> deployments = new HashMap<>();
  private final RecordSigner signer;

  private JobledgerClient(
      String bootstrap, Path schemaDir, String prefix, Properties security, RecordSigner signer)
      throws Exception {
    this.prefix = prefix;
    this.signer = signer;
    loadSchemas(schemaDir);
    Properties p = new Properties();
    p.putAll(security);
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.ACKS_CONFIG, "all");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
    producer = new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
    Properties c = new Properties();
    c.putAll(security);
    c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    consumer = new KafkaConsumer<>(c, new StringDeserializer(), new ByteArrayDeserializer());
  }

  /** Every named type, in the published load order: Java's parser needs types defined first. */
  private void loadSchemas(Path dir) throws Exception {
    Schema.Parser parser = new Schema.Parser();
    for (String file : Files.readAllLines(dir.resolve("load-order.txt"))) {
      if (!file.isBlank()) {
        parser.parse(dir.resolve(file.strip()).toFile());
      }
    }
    for (Schema schema : parser.getTypes().values()) {
      schemas.put(schema.getName(), schema);
      if (schema.getType() == Schema.Type.RECORD) {
        store.addSchema(schema);
      }
    }
  }

  private String topic(String role) {
    return prefix + role;
  }

  /** An event with the header every event carries; unset fields take their schema defaults. */
  private GenericRecordBuilder event(String type) {
    return new GenericRecordBuilder(schemas.get(type))
        .set("event_id", UUID.randomUUID().toString())
        .set("event_time", System.currentTimeMillis())
        .set("producer", PRODUCER);
  }

  private GenericData.EnumSymbol symbol(String enumType, String value) {
    return new GenericData.EnumSymbol(schemas.get(enumType), value);
  }

  private void send(String role, String key, GenericRecord record) throws Exception {
    ByteBuffer body =
        new BinaryMessageEncoder<GenericRecord>(GenericData.get(), record.getSchema())
            .encode(record);
    byte[] value = new byte[body.remaining()];
    body.get(value);
    String type = record.getSchema().getName();
    ProducerRecord<String, byte[]> out = new ProducerRecord<>(topic(role), key, value);
    out.headers().add(TYPE_HEADER, type.getBytes(StandardCharsets.UTF_8));
    if (signer != null) {
      signer.sign(out, type);
    }
    producer.send(out).get();
  }

  /**
   * Signs each record as jobledger's services check it: an Ed25519 signature over
   * "jobledger-record-v1", then the topic, the key, the value and the type header's value, each
   * as a 4-byte big-endian length and its bytes, in the headers jobledger.signer (the key id) and
   * jobledger.signature (the 64 raw signature bytes).
   */
  static final class RecordSigner {
    private static final byte[] PREFIX = "jobledger-record-v1".getBytes(StandardCharsets.UTF_8);
    private final PrivateKey key;
    private final byte[] keyId;

    private RecordSigner(PrivateKey key, byte[] keyId) {
      this.key = key;
      this.keyId = keyId;
    }

    /** The PKCS#8 PEM file of an Ed25519 key, as {@code jobledger keys new} writes it. */
    static RecordSigner load(Path pem) throws Exception {
      String text = Files.readString(pem);
      String body = text.replaceAll("-----(BEGIN|END) PRIVATE KEY-----", "")
          .replaceAll("\\s", "");
      byte[] pkcs8 = Base64.getDecoder().decode(body);
      PrivateKey key =
          KeyFactory.getInstance("Ed25519").generatePrivate(new PKCS8EncodedKeySpec(pkcs8));
      // an Ed25519 PKCS#8 key ends with its 32-byte seed
      byte[] seed = Arrays.copyOfRange(pkcs8, pkcs8.length - 32, pkcs8.length);
      return new RecordSigner(key, keyId(seed));
    }

    /**
     * The first 16 hex digits of the SHA-256 of the raw public key. Java derives no public key
     * from a private one, but its Ed25519 generator makes the pair from the 32 bytes it draws,
     * so it is given the key's seed to draw.
     */
    private static byte[] keyId(byte[] seed) throws Exception {
      KeyPairGenerator generator = KeyPairGenerator.getInstance("Ed25519");
      generator.initialize(NamedParameterSpec.ED25519, new SecureRandom() {
        @Override
        public void nextBytes(byte[] bytes) {
          System.arraycopy(seed, 0, bytes, 0, bytes.length);
        }
      });
      byte[] x509 = generator.generateKeyPair().getPublic().getEncoded();
      byte[] raw = Arrays.copyOfRange(x509, x509.length - 32, x509.length);
      String hex = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(raw));
      return hex.substring(0, 16).getBytes(StandardCharsets.US_ASCII);
    }

    void sign(ProducerRecord<String, byte[]> record, String type) throws Exception {
      ByteArrayOutputStream signed = new ByteArrayOutputStream();
      signed.write(PREFIX);
      byte[] key =
          record.key() == null ? new byte[0] : record.key().getBytes(StandardCharsets.UTF_8);
      for (byte[] part : List.of(record.topic().getBytes(StandardCharsets.UTF_8), key,
          record.value(), type.getBytes(StandardCharsets.UTF_8))) {
        signed.write(ByteBuffer.allocate(4).putInt(part.length).array());
        signed.write(part);
      }
      Signature signature = Signature.getInstance("Ed25519");
      signature.initSign(this.key);
      signature.update(signed.toByteArray());
      record.headers().add("jobledger.signer", keyId).add("jobledger.signature", signature.sign());
    }
  }

  /**
   * Kafka's Java settings from a librdkafka property file (what {@code jobledger broker --secure}
   * writes per principal): SASL/SCRAM credentials become a JAAS line, a PEM CA a PEM trust store.
   */
  static Properties security(Path file) throws Exception {
    Map<String, String> given = new HashMap<>();
    for (String line : Files.readAllLines(file)) {
      int eq = line.indexOf('=');
      if (eq > 0 && !line.startsWith("#")) {
        given.put(line.substring(0, eq).strip(), line.substring(eq + 1).strip());
      }
    }
    Properties p = new Properties();
    if (given.containsKey("security.protocol")) {
      p.put("security.protocol", given.get("security.protocol"));
    }
    String mechanism = given.get("sasl.mechanisms");
    if (mechanism != null) {
      String module = mechanism.startsWith("SCRAM")
          ? "org.apache.kafka.common.security.scram.ScramLoginModule"
          : "org.apache.kafka.common.security.plain.PlainLoginModule";
      p.put("sasl.mechanism", mechanism);
      p.put("sasl.jaas.config", module + " required username=\"" + given.get("sasl.username")
          + "\" password=\"" + given.get("sasl.password") + "\";");
    }
    if (given.containsKey("ssl.ca.location")) {
      p.put("ssl.truststore.type", "PEM");
      p.put("ssl.truststore.location", given.get("ssl.ca.location"));
    }
    return p;
  }

  /** Single-object bytes -> record: the writer schema is found by the fingerprint. */
  private GenericRecord decode(byte[] value) throws Exception {
    long fingerprint = ByteBuffer.wrap(value, 2, 8).order(java.nio.ByteOrder.LITTLE_ENDIAN).getLong();
    Schema writer = store.findByFingerprint(fingerprint);
    if (writer == null) {
      return null; // an event type newer than these schemas: not ours to read
    }
    return decoders
        .computeIfAbsent(writer, s -> new BinaryMessageDecoder<>(GenericData.get(), s, store))
        .decode(value);
  }

  private void listenFromNow() {
    List<TopicPartition> parts = new ArrayList<>();
    for (String role : List.of("job", "taskexecutor")) {
      for (PartitionInfo info : consumer.partitionsFor(topic(role))) {
        parts.add(new TopicPartition(info.topic(), info.partition()));
      }
    }
    consumer.assign(parts);
    consumer.seekToEnd(parts);
    parts.forEach(consumer::position); // fix the start before anything is written
  }

  private void registerTaskExecutor(int slots) throws Exception {
    GenericRecord profile =
        new GenericRecordBuilder(schemas.get("ResourceProfile"))
            .set("kind", symbol("ResourceProfileKind", "ANY"))
            .build();
    send(
        "resourcemanager",
        resourceId,
        event("TaskManagerRegistered")
            .set("resource_id", resourceId)
            .set("address", "java-client")
            .set("number_of_slots", slots)
            .set("resource_profile", profile)
            .set("instance_id", instanceId)
            .build());
  }

  private void heartbeat() throws Exception {
    send(
        "resourcemanager",
        resourceId,
        event("TaskManagerHeartbeat")
            .set("resource_id", resourceId)
            .set("instance_id", instanceId)
            .build());
  }

  private void submitJob(int parallelism) throws Exception {
    GenericRecord vertex =
        new GenericRecordBuilder(schemas.get("JobVertex"))
            .set("vertex_id", "noop")
            .set("name", "no-op tasks")
            .set("invokable_class_name", "noop")
            .set("parallelism", parallelism)
            .build();
    send(
        "job",
        jobId,
        event("JobSubmitted")
            .set("job_id", jobId)
            .set("job_name", "submitted from Java")
            .set("vertices", List.of(vertex))
            .build());
    send(
        "job",
        jobId,
        event("JobMasterLeadershipGranted")
            .set("job_id", jobId)
            .set("job_master_id", "jm-" + jobId)
            .build());
    send(
        "job",
        jobId,
        event("ResourceManagerConnected")
            .set("job_id", jobId)
            .set("resource_manager_id", "resourcemanager")
            .build());
  }

  /** The task runner's part: a deployment accepted into our slot runs and finishes at once. */
  private void runTask(GenericRecord deployment) throws Exception {
    for (String state : List.of("INITIALIZING", "RUNNING", "FINISHED")) {
      send(
          "job",
          jobId,
          event("TaskExecutionStateChanged")
              .set("job_id", jobId)
              .set("job_master_id", deployment.get("job_master_id").toString())
              .set("execution_attempt_id", deployment.get("execution_attempt_id").toString())
              .set("execution_state", symbol("ExecutionState", state))
              .set("resource_id", resourceId)
              .build());
    }
    send(
        "taskexecutor",
        resourceId,
        event("TaskFinalStateReported")
            .set("job_id", jobId)
            .set("resource_id", resourceId)
            .set("execution_attempt_id", deployment.get("execution_attempt_id").toString())
            .set("execution_state", symbol("ExecutionState", "FINISHED"))
            .build());
  }

  /** A field's value as text, or null where the event has no such field or it is null. */
  private static String text(GenericRecord e, String field) {
    Object value = e.hasField(field) ? e.get(field) : null;
    return value == null ? null : value.toString();
  }

  /** Prints what concerns us; returns the job's final status once it has one. */
  private String handle(GenericRecord e) throws Exception {
    String type = e.getSchema().getName();
    boolean ours = resourceId.equals(text(e, "resource_id")) || jobId.equals(text(e, "job_id"))
        || resourceId.equals(text(e, "owner_id")) || jobId.equals(text(e, "owner_id"));
    if (!ours) {
      return null;
    }
    switch (type) {
      case "TaskManagerRegistrationAccepted":
        System.out.println("TaskExecutor " + resourceId + " registered at the ResourceManager");
        break;
      case "SlotOfferAccepted":
        System.out.println("slot offer accepted: slot " + e.get("slot_index") + " as allocation "
            + e.get("allocation_id"));
        break;
      case "SlotOfferRejected":
        System.out.println("slot offer rejected: " + e.get("reason"));
        break;
      case "TaskDeploymentRequested":
        deployments.put(e.get("execution_attempt_id").toString(), e);
        System.out.println("task deployed: " + e.get("vertex_id") + "[" + e.get("subtask_index")
            + "] into slot " + e.get("slot_index"));
        break;
      case "TaskSubmissionAccepted":
        GenericRecord deployment = deployments.get(e.get("execution_attempt_id").toString());
        if (deployment != null) {
          runTask(deployment);
        }
        break;
      case "JobStatusChanged":
        String to = e.get("to_status").toString();
        System.out.println("job " + jobId + ": " + e.get("from_status") + " -> " + to
            + (text(e, "cause") != null ? " (" + text(e, "cause") + ")" : ""));
        return TERMINAL.contains(to) ? to : null;
      case "EventRejected":
        System.out.println("rejected: " + e.get("reason"));
        break;
      default:
        break;
    }
    return null;
  }

  private String run(int parallelism, long timeoutMs) throws Exception {
    listenFromNow();
    registerTaskExecutor(parallelism);
    submitJob(parallelism);
    System.out.println("submitted job " + jobId + " (" + parallelism + " no-op tasks)");
    long deadline = System.currentTimeMillis() + timeoutMs;
    long nextHeartbeat = 0;
    while (System.currentTimeMillis() < deadline) {
      if (System.currentTimeMillis() >= nextHeartbeat) {
        heartbeat();
        nextHeartbeat = System.currentTimeMillis() + 2_000;
      }
      for (ConsumerRecord<String, byte[]> record : consumer.poll(Duration.ofMillis(200))) {
        byte[] value = record.value();
        if (value == null || value.length < 10 || value[0] != (byte) 0xC3 || value[1] != 0x01) {
          continue; // not single-object encoded (e.g. a Confluent-format writer)
        }
        GenericRecord event = decode(value);
        String end = event == null ? null : handle(event);
        if (end != null) {
          return end;
        }
      }
    }
    return null;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> options = new HashMap<>(Map.of(
        "--prefix", "jobledger.", "--parallelism", "2", "--timeout-s", "120"));
    for (int i = 0; i + 1 < args.length; i += 2) {
      options.put(args[i], args[i + 1]);
    }
    if (!options.containsKey("--bootstrap") || !options.containsKey("--schemas")) {
      System.err.println("usage: JobledgerClient --bootstrap HOST:PORT --schemas DIR "
          + "[--prefix P] [--parallelism N] [--timeout-s S] [--properties FILE] "
          + "[--signing-key FILE]");
      System.exit(2);
    }
    Properties security = options.containsKey("--properties")
        ? security(Path.of(options.get("--properties"))) : new Properties();
    RecordSigner signer = options.containsKey("--signing-key")
        ? RecordSigner.load(Path.of(options.get("--signing-key"))) : null;
    JobledgerClient client = new JobledgerClient(options.get("--bootstrap"),
        Path.of(options.get("--schemas")), options.get("--prefix"), security, signer);
    String end;
    try {
      end = client.run(Integer.parseInt(options.get("--parallelism")),
          Long.parseLong(options.get("--timeout-s")) * 1000);
    } finally {
      client.producer.close();
      client.consumer.close();
    }
    if (end == null) {
      System.out.println("job " + client.jobId + " did not end within "
          + options.get("--timeout-s") + " s");
    }
    System.exit("FINISHED".equals(end) ? 0 : 1);
  }
}
