"""A stack's nightly schedules (EventBridge Scheduler) as ``parkbrake schedule`` sees them."""
