import java.util.HashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

// Moves every partition of a topic back to its preferred leader (the first
// replica) through the Admin API, and prints "partition -> outcome" lines.
// Run with Java's source launcher: java -cp <kafka jars> ElectLeaders.java <bootstrap> <topic>
public class ElectLeaders {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
    try (Admin admin = Admin.create(props)) {
      TopicDescription topic = admin.describeTopics(Set.of(args[1])).allTopicNames().get().get(args[1]);
      Set<TopicPartition> partitions = new HashSet<>();
      for (TopicPartitionInfo info : topic.partitions()) partitions.add(new TopicPartition(args[1], info.partition()));
      Map<TopicPartition, Optional<Throwable>> result = admin.electLeaders(ElectionType.PREFERRED, partitions).partitions().get();
      for (Map.Entry<TopicPartition, Optional<Throwable>> e : result.entrySet()) {
        System.out.println(e.getKey().partition() + " " + e.getValue().map(Throwable::getMessage).orElse("elected"));
      }
    }
  }
}
