package example.beamnominal;

import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.UUID;
import org.apache.beam.model.pipeline.v1.ExternalTransforms.ExternalConfigurationPayload;
import org.apache.beam.sdk.coders.CoderException;
import org.apache.beam.sdk.coders.RowCoder;
import org.apache.beam.sdk.schemas.Schema;
import org.apache.beam.sdk.schemas.Schema.FieldType;
import org.apache.beam.sdk.schemas.SchemaTranslation;
import org.apache.beam.sdk.transforms.PTransform;
import org.apache.beam.sdk.util.CoderUtils;
import org.apache.beam.sdk.util.construction.External;
import org.apache.beam.sdk.values.PCollection;
import org.apache.beam.sdk.values.Row;
import org.apache.beam.vendor.grpc.v1p69p0.com.google.protobuf.ByteString;

/**
 * Writes schema'd {@link Row}s to Nominal with beam_nominal's Python {@code WriteToNominal}, expanded
 * by a Python expansion service ({@code python -m apache_beam.runners.portability.expansion_service_main
 * --fully_qualified_name_glob 'beam_nominal.*'}) as {@code beam_nominal.xlang.WriteToNominal}.
 *
 * <p>Each Row is one element of WriteToNominal: a point {@code (channel STRING, timestamp INT64,
 * value)} or a wide record {@code (timestamp INT64, <one field per channel>)}, a null field being no
 * point. Timestamps are INT64 nanoseconds since the Unix epoch (UTC), or whatever WriteToNominal
 * reads with the options given. Field types travel as Beam schema types: an INT64 lands as an int64
 * series, a DOUBLE as a double one, a STRING as a string one.
 *
 * <p>The output is the elements that could not be written, as Rows of {@link #FAILED} {@code
 * (element, error, reason)}: the element as Python shows it, the exception's class name and what
 * was wrong, naming the field. Nothing else reports them: read them.
 *
 * <p>No API token is passed here: it would travel in the expansion request and the job's pipeline.
 * The Python workers read {@code NOMINAL_TOKEN} from their environment.
 */
public final class WriteToNominal extends PTransform<PCollection<Row>, PCollection<Row>> {

  /** The URN of Beam's Python expansion service for "construct this Python transform by name". */
  public static final String FULLY_QUALIFIED_NAMED_URN =
      "beam:transforms:python:fully_qualified_named";

  /** The Python transform constructed by the expansion service. */
  public static final String CONSTRUCTOR = "beam_nominal.xlang.WriteToNominal";

  /** The schema of the output, the failed elements. */
  public static final Schema FAILED =
      Schema.builder()
          .addStringField("element")
          .addStringField("error")
          .addStringField("reason")
          .build();

  private final String expansionService;
  private final SortedMap<String, Object> kwargs;

  private WriteToNominal(String expansionService, SortedMap<String, Object> kwargs) {
    this.expansionService = expansionService;
    this.kwargs = kwargs;
  }

  /**
   * Writes to {@code target} ({@code grpc://host:port}, {@code https://host/api} ...), dataset
   * {@code datasetRid}, through the expansion service at {@code expansionService} ({@code
   * host:port}).
   */
  public static WriteToNominal to(String target, String datasetRid, String expansionService) {
    SortedMap<String, Object> kwargs = new TreeMap<>();
    kwargs.put("target", Objects.requireNonNull(target, "target"));
    kwargs.put("dataset_rid", Objects.requireNonNull(datasetRid, "datasetRid"));
    return new WriteToNominal(Objects.requireNonNull(expansionService, "expansionService"), kwargs);
  }

  /**
   * Passes a keyword argument to the Python {@code WriteToNominal(...)}: a String, Long, Integer,
   * Double, Boolean, a {@code List<String>} or a {@code Map<String, String>} (for {@code tags}).
   * The Python constructor checks names and values at expansion, before the job runs.
   */
  public WriteToNominal withKwarg(String name, Object value) {
    fieldType(name, value); // refuses a type the payload cannot carry, here rather than at expansion
    if (name.equals("token")) {
      throw new IllegalArgumentException(
          "WriteToNominal: a token would travel in the expansion request and the job's pipeline; "
              + "set NOMINAL_TOKEN in the Python workers' environment instead");
    }
    SortedMap<String, Object> copy = new TreeMap<>(kwargs);
    copy.put(name, value);
    return new WriteToNominal(expansionService, copy);
  }

  /** Tags added to every series written ({@code tags=} of the Python transform). */
  public WriteToNominal withTags(Map<String, String> tags) {
    return withKwarg("tags", Map.copyOf(tags));
  }

  /** The name of the Rows' timestamp field ({@code timestamp} unless set). */
  public WriteToNominal withTimestampField(String field) {
    return withKwarg("timestamp_field", field);
  }

  @Override
  public PCollection<Row> expand(PCollection<Row> input) {
    return input.apply(
        External.<PCollection<Row>, Row>of(
            FULLY_QUALIFIED_NAMED_URN, payload().toByteArray(), expansionService));
  }

  /**
   * The expansion request's payload: a Row {@code (constructor, kwargs)} with its schema, as Beam's
   * Python {@code FullyQualifiedNamedTransform} reads it.
   */
  ExternalConfigurationPayload payload() {
    Schema.Builder kwargsSchema = Schema.builder();
    kwargs.forEach((name, value) -> kwargsSchema.addField(name, fieldType(name, value)));
    Schema kwargsRowSchema = withId(kwargsSchema.build());
    Row kwargsRow = Row.withSchema(kwargsRowSchema).addValues(List.copyOf(kwargs.values())).build();

    Schema schema =
        withId(
            Schema.builder()
                .addStringField("constructor")
                .addRowField("kwargs", kwargsRowSchema)
                .build());
    Row row = Row.withSchema(schema).addValues(CONSTRUCTOR, kwargsRow).build();
    try {
      return ExternalConfigurationPayload.newBuilder()
          .setSchema(SchemaTranslation.schemaToProto(schema, true))
          .setPayload(ByteString.copyFrom(CoderUtils.encodeToByteArray(RowCoder.of(schema), row)))
          .build();
    } catch (CoderException e) {
      throw new IllegalStateException("WriteToNominal: cannot encode the keyword arguments", e);
    }
  }

  private static Schema withId(Schema schema) {
    schema.setUUID(UUID.randomUUID());
    return schema;
  }

  private static FieldType fieldType(String name, Object value) {
    if (value instanceof String) {
      return FieldType.STRING;
    } else if (value instanceof Long || value instanceof Integer) {
      return value instanceof Long ? FieldType.INT64 : FieldType.INT32;
    } else if (value instanceof Double) {
      return FieldType.DOUBLE;
    } else if (value instanceof Boolean) {
      return FieldType.BOOLEAN;
    } else if (value instanceof List<?> list && list.stream().allMatch(String.class::isInstance)) {
      return FieldType.array(FieldType.STRING);
    } else if (value instanceof Map<?, ?> map
        && map.keySet().stream().allMatch(String.class::isInstance)
        && map.values().stream().allMatch(String.class::isInstance)) {
      return FieldType.map(FieldType.STRING, FieldType.STRING);
    }
    throw new IllegalArgumentException(
        String.format(
            "WriteToNominal: keyword argument %s=%s is a %s; give a String, Long, Integer, Double, "
                + "Boolean, List<String> or Map<String, String>",
            name, value, value == null ? "null" : value.getClass().getName()));
  }

  @Override
  public String toString() {
    return String.format(
        "WriteToNominal(target=%s, dataset_rid=%s)", kwargs.get("target"), kwargs.get("dataset_rid"));
  }
}
