package example.beamnominal;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.beam.fn.harness.ExternalWorkerService;
import org.apache.beam.model.jobmanagement.v1.JobApi.CancelJobRequest;
import org.apache.beam.model.jobmanagement.v1.JobApi.GetJobStateRequest;
import org.apache.beam.model.jobmanagement.v1.JobApi.JobMessage;
import org.apache.beam.model.jobmanagement.v1.JobApi.JobMessagesRequest;
import org.apache.beam.model.jobmanagement.v1.JobApi.JobMessagesResponse;
import org.apache.beam.model.jobmanagement.v1.JobApi.JobState;
import org.apache.beam.model.jobmanagement.v1.JobApi.PrepareJobRequest;
import org.apache.beam.model.jobmanagement.v1.JobApi.PrepareJobResponse;
import org.apache.beam.model.jobmanagement.v1.JobApi.RunJobRequest;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc.JobServiceBlockingStub;
import org.apache.beam.model.pipeline.v1.RunnerApi;
import org.apache.beam.sdk.Pipeline;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.PipelineRunner;
import org.apache.beam.sdk.fn.server.GrpcFnServer;
import org.apache.beam.sdk.metrics.MetricResults;
import org.apache.beam.sdk.options.PipelineOptions;
import org.apache.beam.sdk.options.PortablePipelineOptions;
import org.apache.beam.sdk.util.construction.Environments;
import org.apache.beam.sdk.util.construction.PipelineOptionsTranslation;
import org.apache.beam.sdk.util.construction.PipelineTranslation;
import org.apache.beam.sdk.util.construction.SdkComponents;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.ManagedChannel;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.ManagedChannelBuilder;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.StatusRuntimeException;
import org.joda.time.Duration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs a pipeline on a Beam job server (Prism, Flink's or Spark's job server) through the Job API,
 * with the pipeline's Java stages in this process: an {@code EXTERNAL} environment served by the
 * Java SDK harness's {@link ExternalWorkerService}, as Beam's {@code PortableRunner} does with
 * {@code --defaultEnvironmentType=LOOPBACK}. Cross-language stages run in the environments their
 * expansion service gave them (for WriteToNominal: a Python worker pool).
 *
 * <p>Nothing is staged: the Java workers are this JVM, with its classpath. The job server must
 * therefore reach this process (a local job server, or one on the same network).
 *
 * <p>Use with {@code --runner=example.beamnominal.JobServiceRunner --jobEndpoint=host:port}.
 */
public final class JobServiceRunner extends PipelineRunner<PipelineResult> {

  private static final Logger LOG = LoggerFactory.getLogger(JobServiceRunner.class);

  private final PipelineOptions options;

  private JobServiceRunner(PipelineOptions options) {
    this.options = options;
  }

  public static JobServiceRunner fromOptions(PipelineOptions options) {
    String endpoint = options.as(PortablePipelineOptions.class).getJobEndpoint();
    if (endpoint == null || endpoint.isEmpty()) {
      throw new IllegalArgumentException(
          "JobServiceRunner needs --jobEndpoint=host:port, the Job API address of a Beam job server");
    }
    return new JobServiceRunner(options);
  }

  @Override
  public PipelineResult run(Pipeline pipeline) {
    PortablePipelineOptions portable = options.as(PortablePipelineOptions.class);
    GrpcFnServer<ExternalWorkerService> workers;
    try {
      // Started before the environment points at it: with no address it takes a free port.
      portable.setDefaultEnvironmentType(null);
      portable.setDefaultEnvironmentConfig(null);
      workers = new ExternalWorkerService(options).start();
    } catch (Exception e) {
      throw new IllegalStateException("cannot start the Java SDK worker service", e);
    }
    String workerAddress = workers.getApiServiceDescriptor().getUrl();
    portable.setDefaultEnvironmentType(Environments.ENVIRONMENT_EXTERNAL);
    portable.setDefaultEnvironmentConfig(workerAddress);
    portable.setFilesToStage(List.of());
    LOG.info("Java SDK workers for the job's Java stages: {}", workerAddress);

    RunnerApi.Pipeline proto =
        mergeEqualEnvironments(
            PipelineTranslation.toProto(pipeline, SdkComponents.create(options)));
    ManagedChannel channel =
        ManagedChannelBuilder.forTarget(portable.getJobEndpoint())
            .usePlaintext()
            .maxInboundMessageSize(Integer.MAX_VALUE)
            .build();
    try {
      JobServiceBlockingStub jobs = JobServiceGrpc.newBlockingStub(channel);
      PrepareJobResponse prepared =
          jobs.withDeadlineAfter(portable.getJobServerTimeout(), TimeUnit.SECONDS)
              .withWaitForReady()
              .prepare(
                  PrepareJobRequest.newBuilder()
                      .setJobName(options.getJobName())
                      .setPipeline(proto)
                      .setPipelineOptions(PipelineOptionsTranslation.toProto(options))
                      .build());
      String jobId =
          jobs.withDeadlineAfter(portable.getJobServerTimeout(), TimeUnit.SECONDS)
              .run(
                  RunJobRequest.newBuilder()
                      .setPreparationId(prepared.getPreparationId())
                      .setRetrievalToken(prepared.getStagingSessionToken())
                      .build())
              .getJobId();
      LOG.info("job {} submitted to {}", jobId, portable.getJobEndpoint());
      return new Result(jobId, channel, workers);
    } catch (RuntimeException e) {
      channel.shutdownNow();
      closeQuietly(workers);
      throw e;
    }
  }

  /**
   * One environment for equal environments: each cross-language expansion names its own (for
   * WriteToNominal twice: two equal Python environments), and a runner starts a worker per
   * environment. Prism keeps one table of metric short ids per job, while each Python worker numbers
   * its own: two Python workers in one job collide there and Prism fails the job decoding a metric.
   * Beam's Python portable runner merges equal environments the same way.
   */
  static RunnerApi.Pipeline mergeEqualEnvironments(RunnerApi.Pipeline pipeline) {
    RunnerApi.Components components = pipeline.getComponents();
    Map<RunnerApi.Environment, String> kept = new HashMap<>();
    Map<String, String> renamed = new HashMap<>();
    new TreeMap<>(components.getEnvironmentsMap())
        .forEach(
            (id, environment) -> {
              String first = kept.putIfAbsent(environment, id);
              renamed.put(id, first == null ? id : first);
            });
    if (kept.size() == components.getEnvironmentsCount()) {
      return pipeline;
    }
    RunnerApi.Components.Builder merged = components.toBuilder();
    renamed.forEach(
        (id, to) -> {
          if (!id.equals(to)) {
            merged.removeEnvironments(id);
          }
        });
    components
        .getTransformsMap()
        .forEach(
            (id, transform) -> {
              String env = transform.getEnvironmentId();
              if (!env.isEmpty() && !renamed.get(env).equals(env)) {
                merged.putTransforms(
                    id, transform.toBuilder().setEnvironmentId(renamed.get(env)).build());
              }
            });
    components
        .getWindowingStrategiesMap()
        .forEach(
            (id, strategy) -> {
              String env = strategy.getEnvironmentId();
              if (!env.isEmpty() && !renamed.get(env).equals(env)) {
                merged.putWindowingStrategies(
                    id, strategy.toBuilder().setEnvironmentId(renamed.get(env)).build());
              }
            });
    LOG.info(
        "{} equal environments merged into {}",
        components.getEnvironmentsCount(),
        kept.size());
    return pipeline.toBuilder().setComponents(merged).build();
  }

  private static void closeQuietly(AutoCloseable c) {
    try {
      c.close();
    } catch (Exception e) {
      LOG.warn("closing {}", c, e);
    }
  }

  /** The submitted job, followed through the Job API's message stream. */
  private static final class Result implements PipelineResult {
    private final String jobId;
    private final ManagedChannel channel;
    private final GrpcFnServer<ExternalWorkerService> workers;
    private final JobServiceBlockingStub jobs;
    private final List<String> errors = new ArrayList<>();
    private State terminal;

    Result(String jobId, ManagedChannel channel, GrpcFnServer<ExternalWorkerService> workers) {
      this.jobId = jobId;
      this.channel = channel;
      this.workers = workers;
      this.jobs = JobServiceGrpc.newBlockingStub(channel);
    }

    @Override
    public synchronized State getState() {
      if (terminal != null) {
        return terminal;
      }
      return toState(
          jobs.getState(GetJobStateRequest.newBuilder().setJobId(jobId).build()).getState());
    }

    @Override
    public synchronized State cancel() {
      return toState(
          jobs.cancel(CancelJobRequest.newBuilder().setJobId(jobId).build()).getState());
    }

    @Override
    public State waitUntilFinish() {
      return waitUntilFinish(Duration.ZERO);
    }

    /**
     * Follows the job's message stream until a terminal state, logging the job's messages; its
     * errors are also in {@link #errors()}. Returns null if {@code duration} (non-zero) passes first.
     */
    @Override
    public synchronized State waitUntilFinish(Duration duration) {
      if (terminal != null) {
        return terminal;
      }
      JobServiceBlockingStub stub =
          duration.getMillis() > 0
              ? jobs.withDeadlineAfter(duration.getMillis(), TimeUnit.MILLISECONDS)
              : jobs;
      State state = State.UNKNOWN;
      try {
        Iterator<JobMessagesResponse> stream =
            stub.getMessageStream(JobMessagesRequest.newBuilder().setJobId(jobId).build());
        while (stream.hasNext()) {
          JobMessagesResponse response = stream.next();
          if (response.hasStateResponse()) {
            state = toState(response.getStateResponse().getState());
            LOG.info("job {}: {}", jobId, state);
          } else if (response.hasMessageResponse()) {
            JobMessage message = response.getMessageResponse();
            if (message.getImportance().getNumber()
                >= JobMessage.MessageImportance.JOB_MESSAGE_ERROR.getNumber()) {
              errors.add(message.getMessageText());
              LOG.error("job {}: {}", jobId, message.getMessageText());
            } else {
              LOG.info("job {}: {}", jobId, message.getMessageText());
            }
          }
        }
      } catch (StatusRuntimeException e) {
        if (duration.getMillis() > 0
            && e.getStatus().getCode()
                == org.apache.beam.vendor.grpc.v1p69p0.io.grpc.Status.Code.DEADLINE_EXCEEDED) {
          return null;
        }
        throw e;
      }
      if (!state.isTerminal()) {
        // The stream ended without a terminal state (the job server went away): ask once.
        state = getState();
      }
      if (state.isTerminal()) {
        terminal = state;
        channel.shutdownNow();
        closeQuietly(workers);
      }
      return state;
    }

    /** The job's error messages seen by {@link #waitUntilFinish}. */
    List<String> errors() {
      return List.copyOf(errors);
    }

    @Override
    public MetricResults metrics() {
      throw new UnsupportedOperationException("JobServiceRunner does not query the job's metrics");
    }

    private static State toState(JobState.Enum state) {
      switch (state) {
        case STOPPED:
          return State.STOPPED;
        case RUNNING:
        case STARTING:
        case CANCELLING:
        case DRAINING:
        case UPDATED:
          return state == JobState.Enum.UPDATED ? State.UPDATED : State.RUNNING;
        case DONE:
          return State.DONE;
        case FAILED:
          return State.FAILED;
        case CANCELLED:
          return State.CANCELLED;
        case DRAINED:
          return State.DONE;
        default:
          return State.UNKNOWN;
      }
    }
  }
}
