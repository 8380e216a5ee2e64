package org.apache.spark.sql.cogra

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.PythonUDF
import org.apache.spark.sql.catalyst.plans.logical.{LogicalPlan, TransformWithStateInPySpark}
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.catalyst.streaming.WriteToStream

/**
 * A streaming MATCH_TREND whose driver was killed while writing its first micro-batch's
 * offsets restarts. The checkpoint file manager writes a log entry to a temporary file
 * (`offsets/.0.<uuid>.tmp`) and renames it; killed before the rename, the log holds no
 * entry, so Spark starts at batch 0 again -- and, before a first batch, it requires the
 * log directories to list empty (`spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart`),
 * which the leftover temporary file is not: the restart failed with
 * STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY. When the writer starts such a query (this
 * post-hoc resolution rule sees its `WriteToStream` before the stream's thread checks),
 * temporary files are removed from a log directory that holds no entry: nothing was
 * written there. Why not turn the check off: it guards every other query of the session.
 */
private[cogra] object UnfinishedCheckpointWrites {
  val Logs: Seq[String] = Seq("offsets", "commits")

  def rule(session: SparkSession): Rule[LogicalPlan] = new Rule[LogicalPlan] {
    override def apply(plan: LogicalPlan): LogicalPlan = {
      plan match {
        case w: WriteToStream if readsMatchTrend(w.inputQuery) => clean(session, w.resolvedCheckpointLocation)
        case _ =>
      }
      plan
    }
  }

  private def readsMatchTrend(plan: LogicalPlan): Boolean = plan.find {
    case t: TransformWithStateInPySpark => t.functionExpr match {
      case u: PythonUDF => u.name == MatchTrend.DisplayName
      case _ => false
    }
    case _ => false
  }.isDefined

  /** Remove the temporary files of `location`'s log directories that hold no entry. */
  def clean(session: SparkSession, location: String): Unit = {
    val root = new Path(location)
    val fs = root.getFileSystem(session.sessionState.newHadoopConf())
    for (name <- Logs) {
      val dir = new Path(root, name)
      if (fs.exists(dir)) {
        val files = fs.listStatus(dir).map(_.getPath)
        val entries = files.filter(p => p.getName.nonEmpty && p.getName.forall(_.isDigit))
        if (entries.isEmpty) {
          files.filter(p => p.getName.startsWith(".") && p.getName.contains(".tmp")).foreach(fs.delete(_, false))
        }
      }
    }
  }
}
