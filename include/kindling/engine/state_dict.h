#pragma once
/// \file
/// kindling's state-dict type: string keys to LibTorch IValues (numbers, strings, tensors,
/// nested dicts and lists). torch::pickle_save writes it in the format Python's torch.load
/// reads as a dict, so everything kindling saves is readable from Python.

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

#include <string>

namespace kindling {

/// String keys to values (a dict of IValues); see the file comment.
using StateDict = c10::impl::GenericDict;

/// An empty StateDict (string keys, values of any type). Does not throw.
inline StateDict new_state_dict() { return StateDict(c10::StringType::get(), c10::AnyType::get()); }

}  // namespace kindling
