package example.beamnominal;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.options.Default;
import org.apache.beam.sdk.options.Description;
import org.apache.beam.sdk.options.PipelineOptionsFactory;
import org.apache.beam.sdk.options.PortablePipelineOptions;
import org.apache.beam.sdk.options.Validation;
import org.apache.beam.sdk.schemas.Schema;
import org.apache.beam.sdk.schemas.Schema.FieldType;
import org.apache.beam.sdk.io.TextIO;
import org.apache.beam.sdk.transforms.Create;
import org.apache.beam.sdk.transforms.Flatten;
import org.apache.beam.sdk.transforms.MapElements;
import org.apache.beam.sdk.values.PCollection;
import org.apache.beam.sdk.values.PCollectionList;
import org.apache.beam.sdk.values.TypeDescriptors;
import org.apache.beam.sdk.values.Row;

/**
 * A Java pipeline writing telemetry to Nominal: engine readings as wide Rows {@code (timestamp, rpm,
 * oil_temp, mode)}, one field per channel, and pressure samples as point Rows {@code (channel,
 * timestamp, value)}, both through beam_nominal's WriteToNominal.
 *
 * <pre>
 * mvn -q compile exec:java -Dexec.args="--jobEndpoint=localhost:8073 \
 *     --expansionService=localhost:8097 --target=grpc://localhost:50051 \
 *     --datasetRid=ri.beam-nominal.local.dataset"
 * </pre>
 *
 * <p>Reading {@code i} (0 &le; i &lt; {@code --readings}) is at {@code --startNanos + i * 1_000_000 + i}
 * ns since the epoch; rpm {@code Long.MAX_VALUE - i}; oil_temp {@code 80 + i / 7.0}, none where
 * {@code i % 5 == 4}; mode {@code "état i % 3"} where {@code i % 4 == 0}, else none; pressure
 * {@code i * 0.1} on channel {@code "pressure.inlet"}.
 */
public final class TelemetryToNominal {

  /** The pipeline's options; it runs with {@link JobServiceRunner} on {@code --jobEndpoint}. */
  public interface Options extends PortablePipelineOptions {
    @Description("Python expansion service serving beam_nominal, host:port")
    @Validation.Required
    String getExpansionService();

    void setExpansionService(String value);

    @Description("Nominal target: grpc://host:port, https://host/api ...")
    @Validation.Required
    String getTarget();

    void setTarget(String value);

    @Description("Nominal dataset rid to write to")
    @Validation.Required
    String getDatasetRid();

    void setDatasetRid(String value);

    @Description("Number of readings to write")
    @Default.Integer(1000)
    int getReadings();

    void setReadings(int value);

    @Description(
        "A CSV file of more points, a line channel,timestamp,value each (timestamp: ns since the "
            + "Unix epoch, an integer; value: a number)")
    String getPointsCsv();

    void setPointsCsv(String value);

    @Description(
        "Where the elements that could not be written go: a text file, a line per element "
            + "(error: reason); the pipeline exits with status 2 if there is any")
    @Default.String("failed-elements.txt")
    String getFailedOutput();

    void setFailedOutput(String value);

    @Description("Timestamp of the first reading, ns since the Unix epoch (UTC)")
    @Default.Long(1_714_564_800_000_000_000L)
    long getStartNanos();

    void setStartNanos(long value);
  }

  static final Schema ENGINE =
      Schema.builder()
          .addInt64Field("timestamp")
          .addInt64Field("rpm")
          .addNullableField("oil_temp", FieldType.DOUBLE)
          .addNullableField("mode", FieldType.STRING)
          .build();

  static final Schema POINT =
      Schema.builder()
          .addStringField("channel")
          .addInt64Field("timestamp")
          .addDoubleField("value")
          .build();

  public static void main(String[] args) throws IOException {
    PipelineOptionsFactory.register(Options.class);
    // JobServiceRunner unless --runner names another: validation asks for a runner first.
    List<String> argv = new ArrayList<>(List.of(args));
    if (argv.stream().noneMatch(a -> a.startsWith("--runner="))) {
      argv.add(0, "--runner=" + JobServiceRunner.class.getName());
    }
    Options options =
        PipelineOptionsFactory.fromArgs(argv.toArray(String[]::new)).withValidation().as(Options.class);
    Pipeline p = Pipeline.create(options);

    List<Row> engine = new ArrayList<>();
    List<Row> pressure = new ArrayList<>();
    for (int i = 0; i < options.getReadings(); i++) {
      long t = options.getStartNanos() + i * 1_000_000L + i;
      engine.add(
          Row.withSchema(ENGINE)
              .addValues(
                  t,
                  Long.MAX_VALUE - i,
                  i % 5 == 4 ? null : 80 + i / 7.0,
                  i % 4 == 0 ? "état " + (i % 3) : null)
              .build());
      pressure.add(Row.withSchema(POINT).addValues("pressure.inlet", t, i * 0.1).build());
    }

    if (options.getPointsCsv() != null) {
      pressure.addAll(readPoints(Path.of(options.getPointsCsv())));
    }

    PCollection<Row> engineFailed =
        p.apply("Engine", Create.of(engine).withRowSchema(ENGINE))
            .apply(
                "WriteEngine",
                WriteToNominal.to(
                        options.getTarget(), options.getDatasetRid(), options.getExpansionService())
                    .withTags(Map.of("source", "java")));
    PCollection<Row> pointsFailed =
        p.apply("Points", Create.of(pressure).withRowSchema(POINT))
            .apply(
                "WritePoints",
                WriteToNominal.to(
                    options.getTarget(), options.getDatasetRid(), options.getExpansionService()));
    Path failedOutput = Path.of(options.getFailedOutput()).toAbsolutePath();
    PCollectionList.of(engineFailed)
        .and(pointsFailed)
        .apply("Failed", Flatten.pCollections())
        .apply(
            "Describe",
            MapElements.into(TypeDescriptors.strings())
                .via(row -> row.getString("error") + ": " + row.getString("reason")))
        .apply("SaveFailed", TextIO.write().to(failedOutput.toString()).withoutSharding());

    PipelineResult.State state = p.run().waitUntilFinish();
    System.out.println("TelemetryToNominal: " + state);
    if (state != PipelineResult.State.DONE) {
      System.exit(1);
    }
    List<String> failed = Files.readAllLines(failedOutput, StandardCharsets.UTF_8);
    if (!failed.isEmpty()) {
      System.err.printf(
          "TelemetryToNominal: %d elements were not written (%s):%n", failed.size(), failedOutput);
      failed.stream().limit(20).forEach(System.err::println);
      System.exit(2);
    }
  }

  /** The points of a CSV file {@code channel,timestamp,value}, refusing a line it cannot read. */
  static List<Row> readPoints(Path csv) throws IOException {
    List<Row> points = new ArrayList<>();
    List<String> lines = Files.readAllLines(csv, StandardCharsets.UTF_8);
    for (int n = 0; n < lines.size(); n++) {
      String[] cells = lines.get(n).split(",", -1);
      try {
        if (cells.length != 3) {
          throw new IllegalArgumentException(cells.length + " cells, not 3");
        }
        points.add(
            Row.withSchema(POINT)
                .addValues(cells[0], Long.parseLong(cells[1]), Double.parseDouble(cells[2]))
                .build());
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(
            String.format(
                "%s line %d: %s; a line is channel,timestamp,value (timestamp in integer ns since "
                    + "the epoch, value a number): %s",
                csv, n + 1, e.getMessage(), lines.get(n)),
            e);
      }
    }
    return points;
  }

  private TelemetryToNominal() {}
}
