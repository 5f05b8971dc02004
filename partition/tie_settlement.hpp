#pragma once
// Tied weights across pipeline stages (the token embedding of the first
// stage and the LM head of the last): after each step's backward, every
// holder's gradient goes to the owner, which adds them in stage order and
// sends the sum back, so that every holder applies the same update. This is
// one stage's side of that exchange, as a small state machine the stage
// actor feeds with arrivals; it never touches the network.
//
//   holder:  begin() -> send its gradient to the owner; owner_sum(name)
//   owner:   holder_gradient(name, from, g) (any time, even before begin());
//            settle(grad) once begun: adds the holders' gradients into its
//            own, in stage order, and says where the sum goes
//   both:    finished() is true once, when every tie of the stage is settled

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "model/tensor.hpp"
#include "partition/routing.hpp"

namespace merak::partition {

class tie_settlement {
 public:
  // A gradient (or the owner's sum) of `name` to send to stage `to`.
  struct send {
    std::string name;
    int to = 0;
  };

  tie_settlement(int stage, std::vector<tied_param> ties);

  bool owns(const std::string& name) const;
  // This stage's gradients are final: starts the step's settlement and
  // returns this stage's gradients to send to their owners.
  std::vector<send> begin();
  // The owner's side: the gradient of `name` from holder stage `from`.
  // Throws merak::error for a tie this stage does not own or a stage that
  // does not hold it.
  void holder_gradient(const std::string& name, int from, model::tensor g);
  // Once begun: every owned tie whose holders have all reported is summed
  // into grad(name) in stage order; returns the sums to send to the holders.
  std::vector<send> settle(const std::function<model::tensor&(const std::string&)>& grad);
  // The holder's side: the owner's sum of `name` arrived (the caller copied it).
  void owner_sum(const std::string& name);
  // True exactly once per step, when every tie of the stage is settled.
  bool finished();

 private:
  const tied_param& find(const std::string& name) const;

  int stage_;
  std::vector<tied_param> ties_;
  std::map<std::string, std::map<int, model::tensor>> inbox_;  // by holder stage
  std::set<std::string> settled_;
  bool begun_ = false, reported_ = false;
};

}  // namespace merak::partition
