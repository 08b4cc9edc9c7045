#pragma once
/// \file
/// Umbrella header: every metric of kindling::metrics (ignite's ignite.metrics).
/// - metric.h            Metric, Usage, NotComputableError: the base and attaching to an engine
/// - classification.h    the input checks shared by Accuracy, Precision and Recall
/// - accuracy.h          Accuracy
/// - precision_recall.h  Precision, Recall and their Average modes
/// - fbeta.h             Fbeta (F1 with beta = 1)
/// - classification_report.h  ClassificationReport (per-class precision, recall, F-beta; ignite's JSON)
/// - top_k.h             TopKCategoricalAccuracy
/// - confusion_matrix.h  ConfusionMatrix, IoU, mIoU, DiceCoefficient, cm_accuracy / precision / recall
/// - multilabel_confusion_matrix.h  MultiLabelConfusionMatrix (one 2x2 matrix per label)
/// - label_agreement.h   CohenKappa, MatthewsCorrCoef (over every sample's labels)
/// - loss.h              Loss
/// - average.h           VariableAccumulation, Average, GeometricAverage
/// - regression.h        MeanSquaredError, MeanAbsoluteError, RootMeanSquaredError
/// - regression_sums.h   ignite.metrics.regression's sums: R2Score, PearsonCorrelation,
///                       MeanError, CanberraMetric, ManhattanDistance, MaximumAbsoluteError, ...
/// - regression_epoch.h  those over every sample: the medians, GeometricMeanRelativeAbsoluteError,
///                       SpearmanRankCorrelation, KendallRankCorrelation
/// - sample_means.h      CosineSimilarity, MeanPairwiseDistance, PSNR (means of a value per sample)
/// - ssim.h              SSIM (structural similarity of images)
/// - frequency.h         Frequency (things processed per second)
/// - gan.h               FID, InceptionScore (over a feature extractor's outputs)
/// - gpu_info.h          GpuInfo (memory and utilization of the host's NVIDIA GPUs, NVML)
/// - information.h       Entropy, KLDivergence, JSDivergence, MutualInformation (of logits)
/// - kernel_dependence.h HSIC, MaximumMeanDiscrepancy (Gaussian-kernel estimates per batch)
/// - clustering.h        SilhouetteScore, CalinskiHarabaszScore, DaviesBouldinScore
/// - rec_sys.h           HitRate, NDCG (ranking quality at cut-offs k)
/// - token_sequences.h   token sequences for the text metrics; ngrams, lcs, modified_precision
/// - bleu.h, rouge.h     Bleu; Rouge, RougeN, RougeL
/// - character_error_rate.h  CharacterErrorRate; perplexity.h  Perplexity
/// - fairness.h          SubgroupMetric, SubgroupDifference, SubgroupAccuracyDifference,
///                       SelectionRate, DemographicParityDifference
/// - running_average.h   RunningAverage
/// - epoch_metric.h      EpochMetric (a function over all predictions and targets)
/// - metrics_lambda.h    MetricsLambda and arithmetic on metrics
/// - ranking.h           RankingMetric: what the ranking metrics share (input kinds, Average)
/// - roc_auc.h           ROC_AUC, RocCurve
/// - average_precision.h AveragePrecision, PrecisionRecallCurve
/// - mean_average_precision.h  MeanAveragePrecision (classification, exact or at recall thresholds)
/// - object_detection.h  ObjectDetectionAvgPrecisionRecall, CommonObjectDetectionMetrics (COCO's AP and AR)
/// - metric_group.h      MetricGroup (named metrics updated and attached together)
#include "kindling/metrics/metric.h"
#include "kindling/metrics/classification.h"
#include "kindling/metrics/classification_report.h"
#include "kindling/metrics/clustering.h"
#include "kindling/metrics/accuracy.h"
#include "kindling/metrics/average.h"
#include "kindling/metrics/average_precision.h"
#include "kindling/metrics/bleu.h"
#include "kindling/metrics/character_error_rate.h"
#include "kindling/metrics/confusion_matrix.h"
#include "kindling/metrics/epoch_metric.h"
#include "kindling/metrics/fairness.h"
#include "kindling/metrics/fbeta.h"
#include "kindling/metrics/frequency.h"
#include "kindling/metrics/gan.h"
#include "kindling/metrics/gpu_info.h"
#include "kindling/metrics/information.h"
#include "kindling/metrics/kernel_dependence.h"
#include "kindling/metrics/label_agreement.h"
#include "kindling/metrics/loss.h"
#include "kindling/metrics/mean_average_precision.h"
#include "kindling/metrics/metric_group.h"
#include "kindling/metrics/metrics_lambda.h"
#include "kindling/metrics/multilabel_confusion_matrix.h"
#include "kindling/metrics/object_detection.h"
#include "kindling/metrics/perplexity.h"
#include "kindling/metrics/precision_recall.h"
#include "kindling/metrics/ranking.h"
#include "kindling/metrics/rec_sys.h"
#include "kindling/metrics/regression.h"
#include "kindling/metrics/regression_epoch.h"
#include "kindling/metrics/regression_sums.h"
#include "kindling/metrics/roc_auc.h"
#include "kindling/metrics/rouge.h"
#include "kindling/metrics/running_average.h"
#include "kindling/metrics/sample_means.h"
#include "kindling/metrics/ssim.h"
#include "kindling/metrics/token_sequences.h"
#include "kindling/metrics/top_k.h"
