import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.io.JsonEncoder;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.avro.message.SchemaStore;

/**
 * Apache Avro's reference implementation on the other end of jobledger's conformance tests.
 *
 * <p>It loads the published .avsc files in the order of load-order.txt, as any Java client would,
 * and answers one request per stdin line (tab separated) with one stdout line:
 *
 * <ul>
 *   <li>{@code FP name}: {@code OK} and the schema's parsingFingerprint64 as 16 hex digits;
 *   <li>{@code DECODE name hex}: the single-object bytes read by {@link BinaryMessageDecoder}
 *       (writer found in a {@link SchemaStore} by fingerprint), answered as Avro JSON;
 *   <li>{@code ENCODE name json}: the Avro JSON record written by {@link BinaryMessageEncoder},
 *       answered as hex.
 * </ul>
 *
 * A request that fails is answered {@code ERR} and the reason, and the next one is read.
 */
public final class AvroConformance {
  private final Map<String, Schema> schemas = new HashMap<>();
  private final SchemaStore.Cache store = new SchemaStore.Cache();

  private AvroConformance(Path schemaDir) throws Exception {
    Schema.Parser parser = new Schema.Parser();
    List<String> order = Files.readAllLines(schemaDir.resolve("load-order.txt"));
    for (String file : order) {
      if (!file.isBlank()) {
        parser.parse(schemaDir.resolve(file.strip()).toFile());
      }
    }
    for (Schema schema : parser.getTypes().values()) {
      schemas.put(schema.getFullName(), schema);
      if (schema.getType() == Schema.Type.RECORD) {
        store.addSchema(schema);
      }
    }
  }

  private Schema schema(String name) {
    Schema schema = schemas.get(name);
    if (schema == null) {
      throw new IllegalArgumentException("no schema named " + name);
    }
    return schema;
  }

  private String answer(String[] request) throws Exception {
    switch (request[0]) {
      case "FP":
        return String.format("%016x", SchemaNormalization.parsingFingerprint64(schema(request[1])));
      case "DECODE":
        {
          Schema reader = schema(request[1]);
          BinaryMessageDecoder<GenericRecord> decoder =
              new BinaryMessageDecoder<>(GenericData.get(), reader, store);
          GenericRecord record = decoder.decode(HexFormat.of().parseHex(request[2]));
          ByteArrayOutputStream out = new ByteArrayOutputStream();
          JsonEncoder json = EncoderFactory.get().jsonEncoder(reader, out);
          new GenericDatumWriter<GenericRecord>(reader).write(record, json);
          json.flush();
          return out.toString(StandardCharsets.UTF_8);
        }
      case "ENCODE":
        {
          Schema writer = schema(request[1]);
          GenericRecord record =
              new GenericDatumReader<GenericRecord>(writer)
                  .read(null, DecoderFactory.get().jsonDecoder(writer, request[2]));
          ByteBuffer encoded = new BinaryMessageEncoder<GenericRecord>(GenericData.get(), writer)
              .encode(record);
          byte[] bytes = new byte[encoded.remaining()];
          encoded.get(bytes);
          return HexFormat.of().formatHex(bytes);
        }
      default:
        throw new IllegalArgumentException("unknown request " + request[0]);
    }
  }

  public static void main(String[] args) throws Exception {
    AvroConformance harness = new AvroConformance(Path.of(args[0]));
    PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    out.println("READY");
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      try {
        out.println("OK\t" + harness.answer(line.split("\t", 3)));
      } catch (Exception e) {
        out.println("ERR\t" + String.valueOf(e).replace('\n', ' ').replace('\t', ' '));
      }
    }
  }
}
