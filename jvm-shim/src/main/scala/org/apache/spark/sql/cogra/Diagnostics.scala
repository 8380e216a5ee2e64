package org.apache.spark.sql.cogra

import java.util.{Collections, WeakHashMap}

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import net.razorvine.pickle.Unpickler

import org.apache.spark.internal.Logging
import org.apache.spark.sql.{AnalysisException, SparkSession}
import org.apache.spark.sql.catalyst.expressions.{Expression, PythonUDF}
import org.apache.spark.sql.catalyst.plans.logical.TransformWithStateInPySpark
import org.apache.spark.sql.classic
import org.apache.spark.sql.execution.streaming.runtime.StreamingQueryWrapper
import org.apache.spark.sql.streaming.StreamingQueryListener
import org.apache.spark.sql.execution.{QueryExecution, SparkPlan}
import org.apache.spark.sql.execution.adaptive.AdaptiveSparkPlanHelper
import org.apache.spark.sql.execution.python.MapInArrowExec
import org.apache.spark.sql.util.QueryExecutionListener
import org.apache.spark.util.CollectionAccumulator

/**
 * What MATCH_TREND's tasks saw that the user should hear of, said where a Spark user looks:
 * the driver's log, as a warning, when the query ends.
 *
 * Each call's Python function carries an accumulator; each task adds its report (a pickled
 * `(id, json)` pair, `cogra.spark.udtf.TaskReport`): rows read, rows skipped for a NULL time
 * or type, the pattern types it saw. A listener on the session adds up the reports of every
 * MATCH_TREND in the finished query's plan, logs what matters, and resets the accumulators
 * (an action run again on the same DataFrame reports anew).
 *
 * Why not a warning on the worker: it goes to an executor's stderr, which a SQL, JDBC or
 * notebook user never sees.
 */
object Diagnostics extends AdaptiveSparkPlanHelper with Logging {
  val AccumulatorName = "MATCH_TREND diagnostics"

  private val listening =
    Collections.synchronizedMap(new WeakHashMap[SparkSession, java.lang.Boolean]())
  private val mapper = new ObjectMapper()

  /** A new accumulator for one call's reports; the session's listener is added once. */
  def accumulator(): Option[CollectionAccumulator[Array[Byte]]] = {
    SparkSession.getActiveSession.map { session =>
      if (listening.putIfAbsent(session, java.lang.Boolean.TRUE) == null) {
        session.listenerManager.register(Listener)
      }
      val acc = new CollectionAccumulator[Array[Byte]]
      session.sparkContext.register(acc, AccumulatorName)
      acc
    }
  }

  /** The last warnings logged, newest last (at most `Kept`): `recent` shows them. */
  private val logged = new java.util.ArrayDeque[String]()
  private val Kept = 100

  object Listener extends QueryExecutionListener {
    override def onSuccess(funcName: String, qe: QueryExecution, durationNs: Long): Unit =
      messages(qe.executedPlan).foreach(record)

    /** Resets the reports (a failed run's are not the next run's) where the query got a
     *  physical plan.  One that failed analysis has none, and asking for it throws the
     *  query's own error again: logged by the listener bus as a second error, with the
     *  error's stack trace rewritten to the listener's (Spark's lazy plans re-stamp a cached
     *  failure with each caller's stack), which is what the user then reads. */
    override def onFailure(funcName: String, qe: QueryExecution, exception: Exception): Unit =
      exception match {
        case _: AnalysisException =>
        case _ => scala.util.Try(qe.executedPlan).foreach(messages)
      }
  }

  private val watchingStreams =
    Collections.synchronizedMap(new WeakHashMap[SparkSession, java.lang.Boolean]())

  /** Log the late rows of the session's streaming MATCH_TRENDs (once per session). */
  def watchStreams(session: classic.SparkSession): Unit = {
    if (watchingStreams.putIfAbsent(session, java.lang.Boolean.TRUE) == null) {
      session.streams.addListener(new LateRows(session))
    }
  }

  /**
   * Late rows -- at or below the watermark, dropped by Spark before the stateful operator
   * and counted in its progress -- said in the driver's log too, per micro-batch of a
   * streaming query planned from SQL's MATCH_TREND.
   */
  private class LateRows(session: classic.SparkSession) extends StreamingQueryListener {
    override def onQueryStarted(event: StreamingQueryListener.QueryStartedEvent): Unit = ()
    override def onQueryTerminated(event: StreamingQueryListener.QueryTerminatedEvent): Unit = ()

    override def onQueryProgress(event: StreamingQueryListener.QueryProgressEvent): Unit = {
      val p = event.progress
      val late = p.stateOperators
        .filter { o =>
          val name = o.operatorName.toLowerCase(java.util.Locale.ROOT)
          name.contains("transformwithstate") || name.contains("pandaswithstate")
        }
        .map(_.numRowsDroppedByWatermark).sum
      if (late > 0 && isMatchTrend(p.id)) {
        val watermark = Option(p.eventTime.get("watermark")).getOrElse("?")
        record(s"MATCH_TREND stream ${Option(p.name).getOrElse(p.id.toString)}: $late late row(s), " +
          s"at or below the watermark $watermark, were dropped in batch ${p.batchId} (not matched)")
      }
    }

    private def isMatchTrend(id: java.util.UUID): Boolean = Option(session.streams.get(id)).exists {
      case w: StreamingQueryWrapper => w.streamingQuery.logicalPlan.exists {
        case t: TransformWithStateInPySpark => named(t.functionExpr)
        case _ => false
      }
      case _ => false
    }

    private def named(function: Expression): Boolean = function match {
      case u: PythonUDF => u.name == MatchTrend.DisplayName
      case _ => false
    }
  }

  private def record(message: String): Unit = {
    logWarning(message)
    logged.synchronized {
      logged.addLast(message)
      while (logged.size > Kept) logged.removeFirst()
    }
  }

  /** The warnings of every MATCH_TREND call in `plan` (its accumulators are reset). */
  def messages(plan: SparkPlan): Seq[String] = {
    val accumulators = collect(plan) { case m: MapInArrowExec => m.func }.collect {
      case u: PythonUDF if u.name == MatchTrend.DisplayName && u.func.accumulator != null =>
        u.func.accumulator
    }.distinct
    accumulators.flatMap { acc =>
      val reports = acc.value.asScala.toSeq.map(decode)
      acc.reset()
      summary(reports)
    }
  }

  /** The warnings logged last, one per line, newest last (what a test reads through py4j:
   * the listener runs on Spark's listener bus, after the action returns). */
  def recent(): String = logged.synchronized(logged.asScala.mkString("\n"))

  private def decode(update: Array[Byte]): JsonNode = {
    val pair = new Unpickler().loads(update).asInstanceOf[Array[AnyRef]]
    mapper.readTree(pair(1).asInstanceOf[String])
  }

  private def summary(reports: Seq[JsonNode]): Seq[String] = {
    if (reports.isEmpty) return Nil
    def total(field: String): Long = reports.map(_.path(field).asLong(0L)).sum
    def strings(r: JsonNode, field: String): Seq[String] =
      r.path(field).elements().asScala.map(_.asText).toSeq
    val out = Seq.newBuilder[String]
    val (nullTime, nullType) = (total("null_time"), total("null_type"))
    if (nullTime + nullType > 0) {
      out += s"MATCH_TREND: $nullTime row(s) with a NULL time and $nullType with a NULL type " +
        "are not events and were skipped"
    }
    val patternTypes = reports.flatMap(strings(_, "pattern_types")).distinct
    val seen = reports.flatMap(strings(_, "seen_types")).toSet
    val missing = patternTypes.filterNot(seen.contains)
    if (missing.nonEmpty) {
      val found = patternTypes.filter(seen.contains)
      val read = if (found.isEmpty) "no row of the pattern's types was read"
        else s"rows of ${found.map(t => s"'$t'").mkString(", ")} were read"
      out += s"MATCH_TREND: no row of the input has the pattern's type " +
        s"${missing.map(t => s"'$t'").mkString(", ")} ($read, ${total("rows")} rows in all); " +
        "a misspelled type matches nothing: compare the pattern's types with the type " +
        "column's values (SELECT DISTINCT on it)"
    }
    out.result()
  }
}
