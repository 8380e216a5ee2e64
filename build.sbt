// The cogra JVM shim (MATCH_TREND for Spark SQL), for sbt users.
//
// The same sources are compiled offline, without sbt, by `python -m cogra.spark.shim_build`
// (using the Scala compiler shipped in pyspark's jars); this build is the equivalent:
//
//   sbt package      ->  jvm-shim/target/scala-2.13/cogra-shim_2.13-0.1.0.jar
//
// then start Spark with
//   --jars <that jar> --conf spark.sql.extensions=org.apache.spark.sql.cogra.CograExtensions
// and a Python (spark.pyspark.python / PYSPARK_PYTHON) that has `cogra` installed.

ThisBuild / scalaVersion := "2.13.18"
ThisBuild / organization := "io.github.cogra"
ThisBuild / version := "0.1.0"

val sparkVersion = "4.3.0"

lazy val shim = (project in file("jvm-shim"))
  .settings(
    name := "cogra-shim",
    libraryDependencies ++= Seq(
      "org.apache.spark" %% "spark-core" % sparkVersion % Provided,
      "org.apache.spark" %% "spark-sql" % sparkVersion % Provided
    ),
    scalacOptions ++= Seq("-release", "17", "-deprecation", "-feature"),
    javacOptions ++= Seq("--release", "17"),
    // Spark, Scala and Python code are all provided at run time: the jar holds the shim only.
    Compile / packageBin / packageOptions += Package.ManifestAttributes(
      "Spark-Version" -> sparkVersion
    )
  )

lazy val root = (project in file("."))
  .aggregate(shim)
  .settings(publish / skip := true)
