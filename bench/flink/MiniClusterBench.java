import java.util.Arrays;

import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.JobGraphBuilder;
import org.apache.flink.runtime.jobgraph.JobVertex;
import org.apache.flink.runtime.jobgraph.tasks.AbstractInvokable;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;

/**
 * Flink's half of the end-to-end benchmark: how long an already running MiniCluster takes to
 * take a job of P no-op tasks from submission to FINISHED.
 *
 * <p>Usage: {@code java MiniClusterBench <repeats> <P>...}. Prints one {@code P <p> <seconds>}
 * line per timed job on stdout; nothing else goes to stdout so the caller can parse it.
 */
public final class MiniClusterBench {

    /** A task that returns at once, so the timing is Flink's scheduling and deployment alone. */
    public static final class NoOp extends AbstractInvokable {
        public NoOp(Environment environment) {
            super(environment);
        }

        @Override
        public void invoke() {}
    }

    private MiniClusterBench() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: MiniClusterBench <repeats> <P>...");
            System.exit(2);
        }
        int repeats = Integer.parseInt(args[0]);
        int[] parallelisms =
                Arrays.stream(args, 1, args.length).mapToInt(Integer::parseInt).toArray();
        int largest = Arrays.stream(parallelisms).max().getAsInt();

        // Subtasks of one vertex never share a slot, so the largest job needs that many slots;
        // one TaskManager keeps the comparison to a single worker process.
        MiniClusterConfiguration config =
                new MiniClusterConfiguration.Builder()
                        .setConfiguration(new Configuration())
                        .setNumTaskManagers(1)
                        .setNumSlotsPerTaskManager(largest)
                        .build();
        try (MiniCluster cluster = new MiniCluster(config)) {
            cluster.start();
            // The first jobs pay for class loading and JIT; neither is what is being compared.
            runJob(cluster, 1);
            runJob(cluster, largest);
            for (int p : parallelisms) {
                for (int i = 0; i < repeats; i++) {
                    System.out.printf("P %d %.6f%n", p, runJob(cluster, p));
                    System.out.flush();
                }
            }
        }
    }

    /** Submits one job of {@code parallelism} no-op tasks and returns seconds until FINISHED. */
    private static double runJob(MiniCluster cluster, int parallelism) throws Exception {
        JobVertex vertex = new JobVertex("noop");
        vertex.setInvokableClass(NoOp.class);
        vertex.setParallelism(parallelism);
        JobGraph job =
                JobGraphBuilder.newStreamingJobGraphBuilder()
                        .setJobName("noop-p" + parallelism)
                        .addJobVertex(vertex)
                        .build();

        long start = System.nanoTime();
        JobID id = cluster.submitJob(job).get().getJobID();
        JobResult result = cluster.requestJobResult(id).get();
        long end = System.nanoTime();

        if (!result.isSuccess()) {
            Throwable cause =
                    result.getSerializedThrowable()
                            .map(t -> (Throwable) t)
                            .orElse(new IllegalStateException("no failure cause recorded"));
            throw new IllegalStateException("job " + id + " of P=" + parallelism + " failed", cause);
        }
        return (end - start) / 1e9;
    }
}
