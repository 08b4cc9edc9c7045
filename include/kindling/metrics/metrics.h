#pragma once
/// \file
/// Umbrella header: every metric of kindling::metrics (ignite's ignite.metrics).
/// - metric.h            Metric, Usage, NotComputableError: the base and attaching to an engine
/// - classification.h    the input checks shared by Accuracy, Precision and Recall
/// - accuracy.h          Accuracy
/// - precision_recall.h  Precision, Recall and their Average modes
/// - fbeta.h             Fbeta (F1 with beta = 1)
/// - top_k.h             TopKCategoricalAccuracy
/// - confusion_matrix.h  ConfusionMatrix, IoU, mIoU, DiceCoefficient, cm_accuracy / precision / recall
/// - multilabel_confusion_matrix.h  MultiLabelConfusionMatrix (one 2x2 matrix per label)
/// - label_agreement.h   CohenKappa, MatthewsCorrCoef (over every sample's labels)
/// - loss.h, average.h   Loss, Average
/// - regression.h        MeanSquaredError, MeanAbsoluteError, RootMeanSquaredError
/// - regression_sums.h   ignite.metrics.regression's sums: R2Score, PearsonCorrelation,
///                       MeanError, CanberraMetric, ManhattanDistance, MaximumAbsoluteError, ...
/// - regression_epoch.h  those over every sample: the medians, GeometricMeanRelativeAbsoluteError,
///                       SpearmanRankCorrelation, KendallRankCorrelation
/// - sample_means.h      CosineSimilarity, MeanPairwiseDistance, PSNR (means of a value per sample)
/// - running_average.h   RunningAverage
/// - epoch_metric.h      EpochMetric (a function over all predictions and targets)
/// - metrics_lambda.h    MetricsLambda and arithmetic on metrics
/// - ranking.h           RankingMetric: what the ranking metrics share (input kinds, Average)
/// - roc_auc.h           ROC_AUC, RocCurve
/// - average_precision.h AveragePrecision, PrecisionRecallCurve
/// - metric_group.h      MetricGroup (named metrics updated and attached together)
#include "kindling/metrics/metric.h"
#include "kindling/metrics/classification.h"
#include "kindling/metrics/accuracy.h"
#include "kindling/metrics/average.h"
#include "kindling/metrics/average_precision.h"
#include "kindling/metrics/confusion_matrix.h"
#include "kindling/metrics/epoch_metric.h"
#include "kindling/metrics/fbeta.h"
#include "kindling/metrics/label_agreement.h"
#include "kindling/metrics/loss.h"
#include "kindling/metrics/metric_group.h"
#include "kindling/metrics/metrics_lambda.h"
#include "kindling/metrics/multilabel_confusion_matrix.h"
#include "kindling/metrics/precision_recall.h"
#include "kindling/metrics/ranking.h"
#include "kindling/metrics/regression.h"
#include "kindling/metrics/regression_epoch.h"
#include "kindling/metrics/regression_sums.h"
#include "kindling/metrics/roc_auc.h"
#include "kindling/metrics/running_average.h"
#include "kindling/metrics/sample_means.h"
#include "kindling/metrics/top_k.h"
