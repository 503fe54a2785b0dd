// Where in the window a quantity is set, one table: core's errors name the quantity a bad value was
// given for (Error::quantity(): "learning rate", "budget", "sequence length", ...), never a
// command-line flag; the window adds the control's own words, "(Train > Learning rate)", as the CLI
// adds its option.
#pragma once
#include <QString>
#include <exception>
#include <string>

namespace attnscope::gui {

// "Train > Learning rate"; "" for a quantity no control of the window sets.
QString control_for_quantity(const std::string& quantity);
// The message of `e`, with " (Train > Learning rate)" after it when it is an Error about a quantity
// a control sets.
QString message_with_control(const std::exception& e);
QString message_with_control(const std::string& message, const std::string& quantity);

}  // namespace attnscope::gui
